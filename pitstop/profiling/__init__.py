"""Everything that runs inside the training process, and the readers of its stream."""
