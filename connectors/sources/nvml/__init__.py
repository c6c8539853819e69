"""``sickbay collect nvml``: a node agent that reads GPUs through NVML (nvidia-ml-py).

``api`` is the Protocol the agent talks to; ``nvml_binding`` is the only module that
imports pynvml, so everything else is tested through a fake NVML layer.
"""
