"""Built-in scheduling plugins, one per module; :mod:`router.registry` lists them."""
