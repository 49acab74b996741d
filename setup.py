from setuptools import find_packages, setup

setup(
    name="fairseq-heads",
    version="0.1.0",
    description="What each attention head of a fairseq Transformer does, and pruning the heads "
                "that do nothing (Voita et al. 2019 and beyond)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["fairseq_heads", "fairseq_heads.*"]),
    # fairseq-fixed: the last upstream fairseq tree with the Python 3.11 dataclass fixes; install it
    # with --no-deps --no-build-isolation (see the Makefile and README.md).
    install_requires=[
        "fairseq-fixed==0.12.3.1",
        "torch>=2.1",
        "sacrebleu>=2.4,<3",
        "sentencepiece",
        "conllu",
        "matplotlib",
        "scipy",
        # the CPU recipes' allocator (fairseq_heads/cpu_memory.py; without it, glibc's tunables)
        'cmeel-mimalloc==3.4.3; platform_system == "Linux" and platform_machine == "x86_64"',
    ],
    # `fairseq-heads import-hf` reads safetensors and tokenizer files; transformers itself is
    # needed only by the tests that compare with Hugging Face (install it with --no-deps so that
    # pip keeps the CPU torch: see the Makefile).
    extras_require={"hf": ["safetensors>=0.4.3", "transformers==4.57.6", "tokenizers>=0.22,<=0.23.0",
                           "huggingface-hub>=0.34,<1.0"]},
    entry_points={"console_scripts": ["fairseq-heads=fairseq_heads.cli:main"]},
)
