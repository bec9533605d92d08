"""CUDA graphs (and the CPU emulator) of one model's phases."""
