"""Built-in scheduling plugins, one per module; :mod:`router.framework.registry` lists them."""
