"""The one compiled part of sparklog: ``sparklog._columns`` (``sparklog/_columns.c``), the
Kafka record decoder of the produce path. ``optional``: without a C compiler the install
still succeeds and ``sparklog.kafka.records`` decodes with aiokafka's record codec.

``sparklog_testkit`` (what the tests and benchmarks share) is importable from an editable
install of the checkout (``pip install -e .[dev]``, ``make setup``) and left out of every
built wheel: an extra cannot add a package, so ``build_py`` drops it unless it builds an
editable install."""

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

TEST_KIT = "sparklog_testkit"


class BuildPyWithoutTestKit(build_py):
    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.editable_mode:
            self.packages = [
                p for p in self.packages if p != TEST_KIT and not p.startswith(TEST_KIT + ".")
            ]


setup(
    cmdclass={"build_py": BuildPyWithoutTestKit},
    ext_modules=[
        Extension(
            "sparklog._columns",
            ["sparklog/_columns.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99"],
        ),
    ]
)
