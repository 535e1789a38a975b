//! Compile-fail tests: every mistake a user can make with `#[tool]` and `#[reward]` gets
//! one readable error. The expected messages are in `ui/*.stderr`.

#[test]
fn macro_errors_are_readable() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
