from __future__ import annotations

import pytest

from trainctl.data.readers import DataError
from trainctl.data.shapes import Skip, detect, example, ground_truth


@pytest.mark.parametrize(
    ("columns", "shape"),
    [
        ({"messages"}, "messages"),
        ({"conversations", "id"}, "sharegpt"),
        ({"prompt", "chosen", "rejected"}, "preference"),
        ({"instruction", "input", "output"}, "alpaca"),
        ({"instruction", "output"}, "alpaca"),
        ({"question", "answer", "id"}, "question_answer"),
        ({"prompt", "response"}, "prompt_response"),
        ({"prompt", "completion"}, "prompt_completion"),
    ],
)
def test_detect(columns, shape):
    assert detect(columns).name == shape


def test_unknown_shape_lists_columns_and_flags():
    with pytest.raises(DataError) as e:
        detect({"foo", "bar"})
    assert e.value.message == "cannot tell what these rows are: columns bar, foo."
    assert "--prompt-col and --response-col" in e.value.hint


def test_ambiguous_shape_names_both_readings():
    with pytest.raises(DataError) as e:
        detect({"question", "answer", "messages"})
    assert e.value.message.startswith("ambiguous rows: they could be messages (messages=messages) or question_answer")
    assert e.value.details == ["columns: answer, messages, question"]


def test_mapping_flags_decide():
    assert detect({"q", "a", "messages"}, {"prompt_col": "q", "response_col": "a"}).columns == {
        "prompt": "q",
        "response": "a",
    }
    with pytest.raises(DataError, match="no such column: --prompt-col nope"):
        detect({"q", "a"}, {"prompt_col": "nope", "response_col": "a"})


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("so 5 apples\n#### 5", "5"),
        ("#### 1,234", "1234"),
        ("the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{1}, then \\boxed{x^{2}}", "x^{2}"),
        ("Paris", "Paris"),
        ("   ", None),
    ],
)
def test_ground_truth(answer, truth):
    assert ground_truth(answer) == truth


def test_preference_rows_keep_only_what_differs():
    shape = detect({"prompt", "chosen", "rejected"})
    row = {
        "prompt": "Hi?",
        "chosen": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello!"}],
        "rejected": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Go away."}],
    }
    ex = example(shape, row)
    assert ex.prompt == [{"role": "user", "content": "Hi?"}]
    assert ex.chosen == [{"role": "assistant", "content": "Hello!"}]
    assert ex.rejected == [{"role": "assistant", "content": "Go away."}]
    with pytest.raises(Skip, match="the same"):
        example(shape, {"prompt": "a", "chosen": "b", "rejected": "b"})
