"""Installs the `vectorize` engine and its `converters`."""

from setuptools import find_packages, setup

setup(
    name="vectorize",
    version="0.1.0",
    description="Static vectorization (parallel-for) of TensorFlow 2 programs.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["vectorize", "vectorize.*", "converters", "converters.*"]),
    python_requires=">=3.9",
    install_requires=["tensorflow>=2.16", "numpy", "absl-py"],
    extras_require={
        # dp-accounting: the README's private-training example computes its epsilon with it.
        "test": ["pytest", "pytest-xdist", "dp-accounting"],
        # TFP (and the tf-keras it needs with TF 2.21) is what the recursion benchmarks compare with.
        "bench": ["matplotlib", "tensorflow-probability>=0.25", "tf-keras"],
    },
)
