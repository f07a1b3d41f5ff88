"""The scheduling framework: the roles, candidate tables, the plugin registry, profiles and the engine that runs them; the built-in plugins."""
