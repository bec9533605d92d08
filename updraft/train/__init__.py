"""Training EAGLE / EAGLE-3 draft heads by self-distillation (``updraft train-draft``): data
through the engine (``data``), the differentiable unrolled head forward (``forward``), losses,
new heads and saving them (``heads``), the loop (``trainer``), its config and CLI."""
