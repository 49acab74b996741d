from . import gate_adam  # noqa: F401
