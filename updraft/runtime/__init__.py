"""The runtime layer: model runners (each owns its phases' static inputs and graphs), request
state on the device, the sampler. The engine and the speculative worker sit on it; it imports
neither."""
