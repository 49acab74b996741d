"""gated_llama fixtures: a dictionary-only LM data dir, and the toy LM data-bin of tests/lm."""
import pytest

from lm.conftest import lm_data_bin  # noqa: F401  (the session's toy LM data-bin)
from llama.helpers import write_lm_dictionary


@pytest.fixture(scope="session")
def dict_dir(tmp_path_factory):
    return write_lm_dictionary(tmp_path_factory.mktemp("llama_dict"), size=40)
