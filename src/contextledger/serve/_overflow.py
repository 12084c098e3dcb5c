"""A request the upstream refused as too long for the model, compacted harder and sent once more.

The proxy's strategy decides what to send by its own count of tokens, which is not the
provider's, and its trigger may sit above a small model's context.  When the upstream answers
that the request is longer than the model takes (OpenAI's ``context_length_exceeded``,
Anthropic's ``prompt is too long``), the proxy holds what could make it fit: the same strategy,
run inside a token budget (:class:`~contextledger.compaction.TokenBudgetComposedStrategy`, which
drops the oldest groups when the strategy alone does not reach it).  The budget is the limit the
error states, brought to the proxy's own count (the request measured as the provider measured
it, scaled, and a twentieth below), or else three quarters of what was sent.  One retry, never a loop: a retry the
upstream refuses again goes back to the client as it came, and so does an error the proxy has
no strategy to answer (``--strategy none``) or was told not to (``--no-overflow-retry``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextledger.compaction import CompactionStrategy, TokenBudgetComposedStrategy
from contextledger.exceptions import ProxyError
from contextledger.tokenizers import Tokenizer

__all__ = ["TooLong", "harder", "overflow_budget", "retried_said", "too_long"]

OVERFLOW_CODE = "context_length_exceeded"
"""OpenAI's error code for a request longer than the model's context (both its APIs)."""

# OpenAI: "This model's maximum context length is 8192 tokens. However, your messages resulted in
# 8227 tokens." or "... However, you requested 4268 tokens (4012 in the messages, 256 in the
# completion)."  The Responses API says only "Your input exceeds the context window of this model".
_OPENAI_LIMIT = re.compile(r"maximum context length is (\d+) tokens")
_OPENAI_SENT = re.compile(
    r"(?:resulted in|requested) (?:about )?(\d+) tokens(?: \((\d+) in the messages, (\d+) in the completion)?"
)
# Anthropic: "prompt is too long: 219898 tokens > 200000 maximum", or, with the reply's room
# counted in, "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648".
_ANTHROPIC_PROMPT = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_ANTHROPIC_WITH_REPLY = re.compile(r"input length and `?max_tokens`? exceed context limit: (\d+) \+ (\d+) > (\d+)")


@dataclass(frozen=True, slots=True)
class TooLong:
    """An upstream's refusal of a request as too long: the most the request's input may hold
    (``limit``) and what the provider counted in it (``counted``), in the provider's tokens, where
    the error says them."""

    limit: int | None = None
    counted: int | None = None


def too_long(failure: ProxyError) -> TooLong | None:
    """What ``failure`` says of the request's length, if it is the upstream's "too long" refusal."""
    if failure.status != 400:
        return None
    message = str(failure)
    if failure.code == OVERFLOW_CODE:
        limit = _OPENAI_LIMIT.search(message)
        sent = _OPENAI_SENT.search(message)
        if limit is None or sent is None:
            return TooLong()
        if sent.group(2) is not None:  # the reply's room counts against the limit too
            return TooLong(int(limit.group(1)) - int(sent.group(3)), int(sent.group(2)))
        return TooLong(int(limit.group(1)), int(sent.group(1)))
    lowered = message.lower()
    if (prompt := _ANTHROPIC_PROMPT.search(lowered)) is not None:
        return TooLong(int(prompt.group(2)), int(prompt.group(1)))
    if (with_reply := _ANTHROPIC_WITH_REPLY.search(lowered)) is not None:
        return TooLong(int(with_reply.group(3)) - int(with_reply.group(2)), int(with_reply.group(1)))
    if lowered.startswith("prompt is too long"):
        return TooLong()
    return None


def overflow_budget(refused: TooLong, sent: int) -> int:
    """The retry's budget for the whole request, in the proxy's tokens, ``sent`` being its count of
    what was refused: the stated limit scaled by the proxy's count over the provider's (and a
    twentieth below it), else three quarters of what was sent; always less than was sent."""
    if refused.limit is not None and refused.counted:
        # A twentieth below: the two counts agree in total, not message by message, so what is
        # cut weighs a little differently in each.
        budget = sent * refused.limit * 19 // (refused.counted * 20)
    else:
        budget = sent * 3 // 4
    return max(1, min(budget, sent - 1))


def harder(strategy: CompactionStrategy, tokenizer: Tokenizer, budget: int) -> CompactionStrategy:
    """``strategy`` run within ``budget`` tokens, the oldest groups dropped where it does not reach
    it, cutting just below the budget (no step grid: a retry is not a conversation's next request)."""
    return TokenBudgetComposedStrategy(
        token_budget=budget, tokenizer=tokenizer, strategies=[strategy], prefix_stable=False
    )


def retried_said(refused: TooLong, budget: int) -> str:
    """The compaction header's value for an answer to a retried request."""
    stated = f"{refused.counted} tokens" if refused.counted is not None else "the request"
    return f"compacted; retried once within {budget} tokens after the upstream refused {stated} as too long"
