// placeholder: safetensors reader and writer (being written)
