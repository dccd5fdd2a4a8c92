"""What the docs' examples and commands run on in ``tests/test_docs.py``: small inputs under the
names the docs give them, the frameworks each page needs, and the smallest run of each command.

An example runs as written, in its page's namespace (the blocks of a page one after another,
as a reader runs them), which starts as :func:`inputs` makes it for the page. A line ``...``
marks code the page leaves out; where the lines after it are indented deeper, it opened a
block (``if True:`` stands for it). ``SHORTER`` lists the few literals an example spends minutes
on, each with the smaller one the test runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import re
import textwrap
from types import SimpleNamespace

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
T, N = 5, 3  # steps and environments of every example's tensors

# ----------------------------------------------------------------------------- needs

#: a name an example (or its page's inputs) uses -> the module it needs
FRAMEWORKS = {
    "stable_baselines3": "stable_baselines3", "adapters.sb3": "stable_baselines3",
    "ray.rllib": "ray", "adapters import rllib": "ray",
    "torchrl": "torchrl", "tensordict": "tensordict", "rsl_rl": "rsl_rl",
    "verl.patch(": "verl", "gym.": "gymnasium", "openrlhf.patch(": "openrlhf", "skyrl.patch(": "skyrl", "areal.patch(": "areal",
}
#: pages whose inputs are made with a framework
PAGE_FRAMEWORKS = {"sb3.md": ("stable_baselines3", "gymnasium"), "torchrl.md": ("torchrl",), "rsl_rl.md": ("rsl_rl",),
                   "rllib.md": ("ray",), "cleanrl.md": ()}


def needs(page: str, code: str) -> tuple:
    """The frameworks an example needs: those it names and its page's, sorted."""
    needed = [module for name, module in FRAMEWORKS.items() if name in code]
    return tuple(sorted(set(needed) | set(PAGE_FRAMEWORKS.get(page, ()))))


def missing(page: str, code: str):
    """Why the example cannot run here (a framework or a GPU it needs), or None."""
    for module in needs(page, code):
        if importlib.util.find_spec(module) is None:
            return f"needs {module}, which is not installed"
    if "CudaGraphModule" in code and not torch.cuda.is_available():
        return "needs a CUDA GPU (CudaGraphModule captures CUDA graphs)"
    return None


# ----------------------------------------------------------------------------- the code


#: (page, literal as written, what the test runs): an example's literal that costs minutes
SHORTER = {  # SB3's PPO: one rollout of 64 steps and its update, not 49 rollouts of 2,048
    ("sb3.md", 'PPO("MlpPolicy", "CartPole-v1")'): 'PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64)',
    ("sb3.md", "model.learn(100_000)"): "model.learn(64)",
}


def runnable(page: str, code: str) -> str:
    """The example as Python: dedented, ``...`` as the module docstring says, ``SHORTER`` applied."""
    lines = textwrap.dedent(code).splitlines()
    out = []
    for k, line in enumerate(lines):
        if line.strip() == "...":
            indent = len(line) - len(line.lstrip())
            after = next((x for x in lines[k + 1:] if x.strip()), "")
            if len(after) - len(after.lstrip()) > indent:
                line = " " * indent + "if True:  # ..."
        out.append(line)
    text = "\n".join(out)
    for (name, written), shorter in SHORTER.items():
        if name == page:
            text = text.replace(written, shorter)
    return text


# ----------------------------------------------------------------------------- the inputs


def _randn(*shape, gen, device="cpu", dtype=torch.float32):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def _flags(*shape, gen, device="cpu", dtype=torch.float32):
    return (torch.rand(shape, generator=gen) < 0.3).to(device=device, dtype=dtype)


class _Agent(torch.nn.Module):
    """CleanRL's agent as far as the examples call it: ``get_value(obs)`` of shape ``[n, 1]``
    (with ``heads=2``, RND's extrinsic and intrinsic values)."""

    def __init__(self, heads: int = 1, obs_dim: int = 4):
        super().__init__()
        self.critic = torch.nn.Linear(obs_dim, heads)

    def get_value(self, obs):
        value = self.critic(obs.float())
        return value if value.shape[-1] == 1 else tuple(value.split(1, dim=-1))


def _make_env(env_id, idx, capture_video, run_name):
    """CleanRL's ``make_env``: a thunk that makes a reset environment, here with episodes of 3
    steps, so that truncations happen within the examples' few steps."""
    import gymnasium as gym

    def thunk():
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id, max_episode_steps=3))
        env.reset(seed=idx)
        return env

    return thunk


def _cleanrl(ns: dict) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    s = dict(gen=gen, device=device)
    args = SimpleNamespace(num_steps=T, num_envs=N, gamma=0.99, gae_lambda=0.95, int_gamma=0.99, ext_coef=2.0,
                           int_coef=1.0, env_id="CartPole-v1", capture_video=False, seed=1)
    ns.update(
        torch=torch, np=__import__("numpy"), device=device, args=args, run_name="docs", agent=_Agent().to(device),
        make_env=_make_env, next_obs=_randn(N, 4, **s), action=torch.zeros(N, dtype=torch.long, device=device),
        rewards=_randn(T, N, **s), values=_randn(T, N, **s), dones=_flags(T, N, **s), next_done=_flags(N, **s),
        # the rollout's storage and bootstrap as the page's truncation section keeps them (envs.step's flags,
        # unshifted; next_value as CleanRL reshapes it), for the examples after it that need no environment
        terminations=_flags(T, N, **s), truncations=_flags(T, N, **s), next_value=_randn(1, N, **s),
        curiosity_rewards=_randn(T, N, **s), ext_values=_randn(T, N, **s), int_values=_randn(T, N, **s),
        vals=_randn(T, N, **s), gamma=0.99, gae_lambda=0.95, exact=False,
    )
    if importlib.util.find_spec("gymnasium"):
        ns["gym"] = __import__("gymnasium")


def _cleanrl_block(ns: dict, code: str) -> None:
    ns["agent"] = _Agent(heads=2 if "next_value_ext" in code else 1).to(ns["device"])  # RND's has two value heads


def _sb3(ns: dict) -> None:
    import gymnasium as gym

    ns["env"] = gym.make("CartPole-v1")


def _sb3_block(ns: dict, code: str) -> None:
    if '"ppo_cartpole"' in code:  # the file the example loads: the page's model, saved
        ns["model"].save("ppo_cartpole")


def _torchrl(ns: dict) -> None:
    from tensordict.nn import TensorDictModule
    from torchrl.modules import ProbabilisticActor, ValueOperator

    logits = TensorDictModule(torch.nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"])
    ns["actor"] = ProbabilisticActor(logits, in_keys=["logits"], distribution_class=torch.distributions.Categorical,
                                     return_log_prob=True)
    ns["critic"] = ValueOperator(torch.nn.Linear(4, 1), in_keys=["observation"])


def _rsl_rl(ns: dict) -> None:
    """Isaac Lab's train script as far as the example reads it."""
    from rsl_rl.runners import OnPolicyRunner

    spec = importlib.util.spec_from_file_location("rsl_rl_env", ROOT / "integration_tests" / "rsl_rl_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the tests' PointMass environment and training configuration
    ns["env"] = module.PointMass(num_envs=4)
    ns["agent_cfg"] = SimpleNamespace(to_dict=module.train_cfg, device="cpu", max_iterations=1)
    ns["log_dir"] = None
    ns["OnPolicyRunner"] = OnPolicyRunner


def _rllib(ns: dict) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    ns["config"] = PPOConfig()
    ns["MyPPOLearner"] = type("MyPPOLearner", (PPOTorchLearner,), {})


def _verl(ns: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    mask = (torch.arange(T) < torch.tensor([[T], [T - 2], [2]])).long()
    log_probs = -torch.rand(N, T, generator=gen)
    ns.update(token_level_rewards=_randn(N, T, gen=gen), values=_randn(N, T, gen=gen, dtype=torch.bfloat16),
              response_mask=mask, gamma=1.0, lam=0.95,
              config=SimpleNamespace(gamma=1.0), index=np.array(["uid-0", "uid-0", "uid-1"], dtype=object),
              old_log_probs=log_probs, sum_pi_squared=log_probs.exp() ** 2 + 0.1, rollout_is_weights=torch.ones(N, T),
              algo_config={"gdpo_reward_keys": ["format_reward", "accuracy_reward"]},
              non_tensor_batch={"format_reward": np.array([1.0, 0.0, 1.0]), "accuracy_reward": np.array([0, 1, 1])},
              batch={"prompts": torch.zeros(N, 2, dtype=torch.int64),
                     "attention_mask": torch.cat([torch.ones(N, 2, dtype=torch.int64), mask], dim=1)})


def _openrlhf(ns: dict) -> None:
    """OpenRLHF's experience maker imported first, through the tool that stands empty modules in
    for its CUDA-only imports (flash-attn, DeepSpeed, vLLM), so that ``patch()`` finds it."""
    import sys

    if importlib.util.find_spec("openrlhf") is None:
        return
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from openrlhf_timing import experience_maker
    finally:
        sys.path.remove(str(ROOT / "tools"))
    experience_maker()


def _skyrl(ns: dict) -> None:
    """SkyRL's batch as its trainer passes it (right-aligned responses, an int64 mask, uids), and
    its ``ppo_utils`` imported through the tool that makes it importable on Python 3.11, so that
    ``patch()`` finds it."""
    import sys

    gen = torch.Generator().manual_seed(0)
    ns.update(token_level_rewards=_randn(N, T, gen=gen), values=_randn(N, T, gen=gen),
              response_mask=(torch.arange(T) >= torch.tensor([[0], [2], [T - 2]])).long(), gamma=1.0, lambd=0.95,
              index=["uid-0", "uid-0", "uid-1"])
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from skyrl_py311 import ppo_utils
    finally:
        sys.path.remove(str(ROOT / "tools"))
    ppo_utils()


def _areal(ns: dict) -> None:
    """AReaL's actor and data modules imported first, through the tool that stands empty
    modules in for the clients they import and never call, so that ``patch()`` finds them."""
    import sys

    if importlib.util.find_spec("areal") is None:
        return
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from areal_cpu_timing import areal_modules
    finally:
        sys.path.remove(str(ROOT / "tools"))
    areal_modules()


def _readme(ns: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    ns.update(rewards=_randn(T, N, gen=gen), values=_randn(T, N, gen=gen), next_values=_randn(T, N, gen=gen),
              last_values=_randn(N, gen=gen), terminated=_flags(T, N, gen=gen, dtype=torch.bool),
              truncated=_flags(T, N, gen=gen, dtype=torch.bool))


#: page -> (its inputs, what a block of it needs first)
PAGES = {"README.md": (_readme, None), "cleanrl.md": (_cleanrl, _cleanrl_block), "sb3.md": (_sb3, _sb3_block),
         "torchrl.md": (_torchrl, None), "rsl_rl.md": (_rsl_rl, None), "rllib.md": (_rllib, None),
         "verl.md": (_verl, None), "openrlhf.md": (_openrlhf, None), "skyrl.md": (_skyrl, None),
         "areal.md": (_areal, None)}


def inputs(page: str) -> dict:
    """The page's namespace before its first example: its inputs, and torch and rlscan imported."""
    import rlscan

    ns = {"__name__": "__docs__", "torch": torch, "rlscan": rlscan}
    make = PAGES.get(page, (None, None))[0]
    if make is not None:
        make(ns)
    return ns


def before(page: str, ns: dict, code: str) -> None:
    hook = PAGES.get(page, (None, None))[1]
    if hook is not None:
        hook(ns, code)


@contextlib.contextmanager
def restored(page: str, ns: dict):
    """Undo what a page's example changes outside its namespace: module settings, patches, Ray."""
    saved = {}
    if page == "sb3.md" and importlib.util.find_spec("stable_baselines3"):
        import rlscan.adapters.sb3 as sb3

        saved[sb3] = {"GPU_MIN_ELEMENTS": sb3.GPU_MIN_ELEMENTS}
    try:
        yield
    finally:
        for module, values in saved.items():
            for name, value in values.items():
                setattr(module, name, value)
        if page == "rllib.md" and importlib.util.find_spec("ray"):
            import ray

            from rlscan.adapters import rllib

            if ns.get("algo") is not None:
                ns.pop("algo").stop()
            rllib.unpatch()
            ray.shutdown()
        if page == "verl.md" and importlib.util.find_spec("verl"):
            from rlscan.adapters import verl

            verl.unpatch()
        if page == "openrlhf.md":
            from rlscan.adapters import openrlhf

            openrlhf.unpatch()
        if page == "skyrl.md":
            from rlscan.adapters import skyrl

            skyrl.unpatch()
        if page == "areal.md":
            from rlscan.adapters import areal

            areal.unpatch()


# ----------------------------------------------------------------------------- commands

#: (a command as the docs write it, why the test reads only its --help)
HELP_ONLY = (
    (r"rlscan bench --host.*", "the host's share times compiled calls and 4096 x 2048 scans: minutes on a CPU"),
    (r"rlscan plan|rlscan bench --merge", "the docs name the command without its arguments"),
    (r"python tools/rllib_timing\.py.*", "it times RLlib's GAE on 64 episodes of 2048 steps"),
    (r"python tools/torch_range_check\.py.*", "it installs about 3.4 GB of torch and CUDA wheels"),
)
#: (a command as the docs write it, why it cannot be cut short where there is a GPU): each times the GPU for
#: minutes. Where there is none it runs, to check that it says it needs one; where there is one the test skips
#: it (tools/gpu_record.py and tools/gpu_check.py are the GPU's own record). A synopsis of one reads its --help.
GPU_RUNS = (
    (r"rlscan tune.*", "rlscan tune times launch settings on this GPU for its budget (1800 s by default)"),
    (r"python tools/gpu_record\.py(?! --dry).*", "it is the GPU record: 540 s of this GPU's time"),
    (r"python tools/gpu_check\.py.*", "it checks every kernel path on this GPU for minutes"),
    (r"python tools/seed_compare\.py.*", "it times the seed's design against rlscan on this GPU for minutes"),
    (r"python tools/verl_timing\.py(?! --cpu).*", "it times verl's estimators on this GPU for minutes"),
    (r"python tools/packed_gpu\.py.*", "it checks and times the packed kernels on this GPU for about 3 minutes"),
)
#: (a command as the docs write it, the frameworks it imports): skipped where one is not installed
COMMAND_FRAMEWORKS = (
    (r"python tools/rllib_timing\.py.*", ("ray", "gymnasium")),
    (r"python tools/verl_timing\.py.*", ("verl",)),
    (r"python tools/verl_v1_keys_timing\.py.*", ("verl",)),
    (r"python tools/openrlhf_timing\.py.*", ("openrlhf",)),
    (r"python tools/skyrl_cpu_timing\.py.*", ("skyrl",)),
    (r"python tools/areal_cpu_timing\.py.*", ("areal",)),
    (r"python tools/gpu_record\.py --dry", ("verl",)),  # its verl_timing step
)
#: tools whose run is cut to ``--dry`` (tiny shapes, few calls: it checks the script); their full runs time the
#: CPU for minutes
DRY_TOOLS = ("tools/areal_cpu_timing.py", "tools/cpu_rows_timing.py", "tools/dual_lambda_timing.py",
             "tools/openrlhf_timing.py", "tools/packed_timing.py", "tools/sharded_timing.py", "tools/skyrl_cpu_timing.py",
             "tools/verl_v1_keys_timing.py",
             "tools/verl_timing.py")


def help_only(command: str):
    """Why the test reads only the command's --help, or None."""
    if is_synopsis(command):
        return "a synopsis"
    return next((why for pattern, why in HELP_ONLY if re.fullmatch(pattern, command)), None)


def gpu_run(command: str):
    """Why the command is not run here, where there is a GPU it would time for minutes, or None."""
    if help_only(command) or not torch.cuda.is_available():
        return None
    return next((why for pattern, why in GPU_RUNS if re.fullmatch(pattern, command)), None)


def command_missing(command: str):
    """Why the command cannot run here (a framework it imports is not installed), or None."""
    for pattern, modules in COMMAND_FRAMEWORKS:
        if re.fullmatch(pattern, command):
            for module in modules:
                if importlib.util.find_spec(module) is None:
                    return f"needs {module}, which is not installed"
    return None


def shortest(argv: list, out: str) -> list:
    """A command as the docs write it, cut to the smallest run that reaches the same code:
    ``rlscan bench`` with ``--quick``, one op at one shape (no grid where the command times
    ``--e2e``), into ``out``, its options sorted, so that commands that differ only in their
    order run once; the CPU timing tools (``DRY_TOOLS``, verl's with ``--cpu``) on their tiny
    shapes (``--dry``)."""
    if argv[0] in DRY_TOOLS and "--dry" not in argv and (argv[0] != "tools/verl_timing.py" or "--cpu" in argv):
        return argv + ["--dry"]
    if argv[:2] != ["rlscan", "bench"]:
        return list(argv)
    options, k = {}, 2
    while k < len(argv):
        takes_value = k + 1 < len(argv) and not argv[k + 1].startswith("--")
        options[argv[k]] = argv[k + 1] if takes_value else None
        k += 2 if takes_value else 1
    options.setdefault("--quick", None)
    if "--ops" not in options:
        options.update({"--ops": "none"} if "--e2e" in options else {"--ops": "gae", "--shapes": "8x16"})
    options["--out"] = out
    return argv[:2] + [word for key in sorted(options) for word in (key, options[key]) if word is not None]


PLACEHOLDER = re.compile(r"\[|\]|\bOP\b|\bNxT\b|\bPATH\b|\bA/|\|")


def is_synopsis(command: str) -> bool:
    """Whether a documented command is a synopsis (``[--option]``, ``OP``, ``a|b``), not a call."""
    return bool(PLACEHOLDER.search(command))
