"""The network: the model, its layers, the one attention function, masks, positional encodings."""
