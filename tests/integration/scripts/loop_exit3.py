"""Exits with code 3 after printing to both streams."""
import sys

print("to stdout")
print("to stderr", file=sys.stderr)
sys.exit(3)
