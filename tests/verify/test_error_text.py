"""What a report says of a failed call (cubridge.verify.error_text)."""

from cubridge.verify.error_text import error_summary


def test_a_framed_error_is_summarised_by_the_lines_that_say_something():
    # (the shape of a Flex FLASH failure: a CuTe DSL diagnostic framed in rules,
    # then Inductor's dump of the call)
    framed = RuntimeError("LoweringException: RuntimeError: CuteDSL template failed: "
                          + "=" * 80 + "\n\x1b[91mDSLRuntimeError: cannot lower aten.clamp"
                          "\x1b[0m\n" + "=" * 80 + "\n  target: flex_attention\n"
                          "  args[0]: TensorBox(" + "x" * 500 + ")\n"
                          "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
    assert error_summary(framed) == ("RuntimeError: LoweringException: RuntimeError: CuteDSL "
                                     "template failed: / DSLRuntimeError: cannot lower aten.clamp")
    long = error_summary(ValueError("y" * 1000))
    assert len(long) == 400 and long.endswith("...")
