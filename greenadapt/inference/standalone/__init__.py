"""Files copied into a served model's folder (``greenadapt export --onnx``): code that runs without greenadapt."""
