"""Python function tools trainctl ships (tools=calculator-fn): examples of `tools.functions`.

A function tool is a plain function with a type hint on every parameter and a Google-style docstring (its schema is
read from them, as verl's @function_tool reads it); it returns the text the model reads, and what it raises becomes
an error text the model reads.
"""

from trainctl.runtime.tools.calculator import calculate


def calculator(expression: str) -> str:
    """Evaluate arithmetic.

    Args:
        expression: e.g. 12 * (3 + 4)
    """
    return calculate(expression)
