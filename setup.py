"""Build the optional native parts: the Kineto parser's column decoder and the critical-path analysis's
longest-path passes (everything else is in pyproject.toml).

``optional=True``: on a machine without a C compiler the package still installs and the parser
uses its pure-Python (msgspec) path.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceview.parsers.kineto._kineto_columns",
            sources=["parsers/kineto/_kineto_columns.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
        Extension(
            "traceview.analyses._graph_paths",
            sources=["analyses/_graph_paths.c"],
            optional=True,
            extra_compile_args=["-O3"],
        ),
    ]
)
