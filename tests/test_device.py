"""posx.core.device: the device names accepted and refused, what an accepted name picks on
this machine, and the thread count."""

from __future__ import annotations

import pytest
import torch

from posx.configure.checks import max_threads
from posx.configure.compose import compose
from posx.core.device import check_device, pick_device, set_threads
from posx.core.errors import PosxError


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_device_names_that_are_accepted(name):
    check_device(name)
    gpus = torch.cuda.device_count()
    index = int(name.split(":")[1]) if ":" in name else 0
    if name in ("auto", "cpu") or index < gpus:  # this machine has it: picked as named
        expected = "cuda" if name == "cuda" or name.startswith("cuda:") or (name == "auto" and gpus) else "cpu"
        assert pick_device(name).type == expected
    else:  # a valid name this machine lacks: refused for the machine, not for the name
        with pytest.raises(PosxError, match=rf"device={name} but (CUDA is not available|this machine has)"):
            pick_device(name)


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "cuda0", "mps"])
def test_device_names_that_are_refused(name):
    with pytest.raises(PosxError, match="cuda:N"):
        check_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_n_without_cuda_is_one_line():
    with pytest.raises(PosxError, match="device=cuda:1 but CUDA is not available"):
        pick_device("cuda:1")


def test_threads_is_checked_and_applied():
    assert compose(["threads=2"]).threads == 2 and compose([]).threads is None
    with pytest.raises(PosxError, match="threads=0 must be at least 1"):
        compose(["threads=0"])
    limit = max_threads()
    assert compose([f"threads={limit}"]).threads == limit >= 64  # oversubscribing a little is allowed
    with pytest.raises(PosxError, match=f"threads={limit + 1} is more than posx starts .*at most {limit}\\)"):
        compose([f"threads={limit + 1}"])
    before = torch.get_num_threads()
    try:
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
