"""Reading weights: safetensors files, checkpoints and architecture layouts."""
