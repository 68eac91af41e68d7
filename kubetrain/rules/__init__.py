"""Pure rules shared by the job spec, render and validate: Kubernetes' names, quantities and object rules
(ported), torchrun's command line, and world size against GPUs. No I/O, no pydantic, no jinja2."""
