"""A reasoning model built from SmolLM2-135M-Instruct by self-distillation (see ``recipe.py``)."""
