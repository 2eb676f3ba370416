"""The proficiency loop as assets: training rollouts, curated dataset, LoRA configuration and
training, the two-model evaluation and the specialist decision."""
