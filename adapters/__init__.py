"""Framework adapters: rlscan's ops inside Stable-Baselines3, TorchRL, CleanRL, rsl_rl, verl, OpenRLHF, SkyRL,
AReaL and RLlib.

Each adapter is a module, ``rlscan.adapters.<name>``, that imports its framework (so it is
importable only where that framework is installed), and takes one of two shapes, by what it
changes.

**It changes one object** (``"object"``): an SB3 model, an rsl_rl algorithm::

    enable(obj, exact=False) -> obj         that object computes with rlscan from now on
    disable(obj) -> obj                     it computes with the framework's own code again
    is_enabled(obj) -> bool                 whether rlscan computes for it now

Other objects, and the framework's classes and modules, are left as they are.

**It changes the framework** (``"framework"``): TorchRL's estimator registry, RLlib's
learner classes, verl's estimator registry and module functions, OpenRLHF's experience
maker's methods, SkyRL's estimator registry and module functions, AReaL's actor and normalisation
methods::

    patch(**options) -> None                the framework hands out rlscan's from now on
    unpatch() -> None                       it hands out exactly the objects patch() replaced
    is_patched() -> bool                    whether it hands out rlscan's now

What was built while patched keeps what it was built with.

Both shapes are idempotent: ``enable`` or ``patch`` again changes only the mode
(``exact=``, for the adapters that have one), and ``disable`` or ``unpatch`` where nothing
is switched on does nothing. ``unpatch`` puts back only the places rlscan's patch still
holds: one that someone else has replaced since is left as theirs.

CleanRL (``"functions"``) has neither: its algorithms are scripts, with no object or registry
to switch, so its adapter is functions that a script calls in place of its loop.

``SHAPES`` says which shape each adapter takes, ``VERBS`` what each shape provides; the
tests check every adapter against them (``integration_tests/test_adapter_contract.py``).
"""

#: adapter module -> its shape
SHAPES = {
    "sb3": "object",
    "rsl_rl": "object",
    "torchrl": "framework",
    "rllib": "framework",
    "verl": "framework",
    "openrlhf": "framework",
    "skyrl": "framework",
    "areal": "framework",
    "cleanrl": "functions",
}

#: shape -> the functions every adapter of that shape provides
VERBS = {
    "object": ("enable", "disable", "is_enabled"),
    "framework": ("patch", "unpatch", "is_patched"),
    "functions": (),
}
