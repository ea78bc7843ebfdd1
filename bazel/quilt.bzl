"""Quilt's C++ rule macros: one place for compiler flags and the test main.

Every Quilt target uses these instead of the native rules:
  quilt_cc_library, quilt_cc_binary, quilt_cc_test.
Libraries are private to their package unless `visibility` says otherwise.
"""

QUILT_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-fno-omit-frame-pointer",
]

def quilt_cc_library(name, copts = [], visibility = None, **kwargs):
    native.cc_library(
        name = name,
        copts = QUILT_COPTS + copts,
        visibility = visibility,
        **kwargs
    )

def quilt_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = QUILT_COPTS + copts,
        **kwargs
    )

def quilt_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    """A GoogleTest test with gmock and Quilt's Status matchers available."""
    native.cc_test(
        name = name,
        copts = QUILT_COPTS + copts,
        size = size,
        deps = deps + [
            "//src/common:status_matchers",
            "//third_party:gtest_main",
        ],
        **kwargs
    )
