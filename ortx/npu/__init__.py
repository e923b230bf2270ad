"""A simulated systolic-array NPU: parameters, the command-stream format, its compiler and the C simulator."""
