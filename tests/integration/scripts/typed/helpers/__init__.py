"""A package the training script below imports: found only with PYTHONPATH=. (as minGPT's projects)."""
