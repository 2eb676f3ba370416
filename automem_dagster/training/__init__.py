"""LoRA SFT of the memory specialist (trl + peft) and its export for the serving endpoints."""
