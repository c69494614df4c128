"""The embedded demo workload: a small CNN whose DataLoader is the bottleneck (run by `pitstop demo`)."""
