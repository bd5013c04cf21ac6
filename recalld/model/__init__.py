"""Local GGUF models: resolution, runtime (llama-cpp-python), pull."""
