"""Package layout that pyproject.toml cannot say on its own.

The benchmark trajectories live in ``benchmarks/traces`` (the repository's benchmarks and tests
read them there); the wheel carries the same files as ``contextfold._bench_traces`` so that
``contextfold bench`` installed from a wheel finds them anywhere.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("src"), "contextfold._bench_traces"],
    package_dir={"": "src", "contextfold._bench_traces": "benchmarks/traces"},
    package_data={
        "contextfold": ["py.typed", "data/*", "inspector/static/*"],
        "contextfold._bench_traces": ["*.json", "README.md"],
    },
    include_package_data=False,
)
