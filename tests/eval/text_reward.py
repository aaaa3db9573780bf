"""A reward for the eval tests whose value depends on the response's text and the row's answer: a random tiny model's
greedy responses are nearly all alike, and verl's gsm8k scorer gives every one 0, so a mean over the test split
would agree with anything. Any change in a response or in which answer it is scored against moves this one."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    value = (sum(map(ord, solution_str)) + int(ground_truth)) % 10 / 10
    return {"score": value, "acc": value >= 0.5}
