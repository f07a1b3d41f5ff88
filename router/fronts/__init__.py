"""The router's surfaces: the OpenAI-compatible proxy, Envoy's ext_proc, the Pick API, and who may use them."""
