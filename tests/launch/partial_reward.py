"""A reward with partial credit for the PPO-family tests: a random tiny model never writes gsm8k's `#### N`, so
verl's gsm8k scorer gives every sample 0, every GRPO advantage is 0 and DAPO's dynamic sampling keeps no group.
This one scores the share of digits in a response, which varies from sample to sample."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    share = sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))
    return {"score": share, "acc": share}
