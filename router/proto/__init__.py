"""The router's own gRPC API (``router.proto``) and its generated modules."""
