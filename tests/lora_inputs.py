"""A curated dataset's statistics and LoRA settings as the meta-LLM recommends them, for the proficiency
loop's tests (settings bounds, the serving vLLM's rank limit)."""

SETTINGS = {"alpha": 32, "dropout": 0.05, "learning_rate": 2e-4, "epochs": 1, "batch_size": 4,
            "target_modules": ["q_proj", "v_proj"], "max_length": 1024}
STATS = {"examples": 400, "kept_decisions": 250, "episodes": 8, "examples_by_phase": {"log": 220, "plan": 180},
         "mean_prompt_chars": 2400, "mean_completion_chars": 60}
GOOD = {"rank": 16, "alpha": 32, "dropout": 0.05, "learning_rate": 0.0002, "epochs": 2, "batch_size": 4,
        "target_modules": ["q_proj", "v_proj"], "max_length": 1024}
