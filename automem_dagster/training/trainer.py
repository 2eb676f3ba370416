"""The trainer class: trl's ``SFTTrainer`` with a validation loss weighted by tokens, like the training loss.

trl's training loss is already the mean over every completion token of the optimizer step, whatever
the micro-batch and accumulation: transformers counts the step's label tokens over all its
micro-batches (and processes) as ``num_items_in_batch`` and trl divides each micro-batch's summed
loss by it. Validation has no such count: transformers averages the mean loss of each micro-batch,
weighted by its examples, so the same weights gave 2.888 with four padded sequences a batch and
2.711 with one (6.5 % apart, measured on an H200 and on the CPU with the embedded base). Here each
validation micro-batch adds its summed token loss and its token count, and the pass reports their
ratio over every process: one number per set of weights, on any device and any micro-batch.
"""

from __future__ import annotations

from functools import cache

IGNORED_LABEL = -100


def completion_tokens(labels):
    """Tokens a causal LM's loss counts in ``labels``: the shifted labels that are not ignored (transformers'
    own count for ``num_items_in_batch``; trl's padding-free batches mask each sequence's first label)."""
    return (labels[..., 1:] != IGNORED_LABEL).sum()


@cache
def trainer_class():
    """``SFTTrainer`` with the token-weighted validation loss (defined on first use: trl loads slowly)."""
    import torch
    from trl import SFTTrainer

    class TokenWeightedSFTTrainer(SFTTrainer):
        """A validation pass reports sum of token losses / tokens over the whole validation set."""

        def evaluation_loop(self, dataloader, description, prediction_loss_only=None, ignore_keys=None,
                            metric_key_prefix="eval"):
            self._validation_sums = torch.zeros(2, dtype=torch.float64, device=self.args.device)
            output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys,
                                             metric_key_prefix)
            loss_sum, tokens = self.accelerator.reduce(self._validation_sums, reduction="sum").tolist()
            if tokens > 0:
                output.metrics[f"{metric_key_prefix}_loss"] = loss_sum / tokens
            return output

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            inputs = self._prepare_inputs(inputs)
            tokens = completion_tokens(inputs["labels"])
            with torch.no_grad(), self.compute_loss_context_manager():
                mean = self.compute_loss(model, inputs).detach()  # this micro-batch's mean over its tokens
            self._validation_sums += torch.stack([mean.double() * tokens, tokens.double()])
            return mean, None, None

    return TokenWeightedSFTTrainer
