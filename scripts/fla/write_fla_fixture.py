#!/usr/bin/env python3
"""Writes model/testdata/fla_mesa_net.json: what FLA's MesaNet defines, for mesa-export's tests.

  python3 scripts/fla/write_fla_fixture.py /work/main/.fla > model/testdata/fla_mesa_net.json

`config`: the keyword arguments of MesaNetConfig.__init__ (fla/models/mesa_net/
configuration_mesa_net.py) with their defaults, read with Python's ast module (no torch or
transformers needed), plus `model_type`. `tensors`: the state dict of MesaNetForCausalLM without
hybrid attention, output gate or attnres, as fla/models/mesa_net/modeling_mesa_net.py and
fla/layers/mesa_net.py build it (nn.Linear weights are [out, in]; ShortConvolution is a depthwise
nn.Conv1d, weight [channels, 1, kernel_size], no bias). Shapes are expressions over config keys;
the script checks that every module it names appears in those sources, so a renamed module in a
newer FLA fails here instead of silently passing.
"""
import ast
import json
import os
import sys

TENSORS = [
    ("model.embeddings.weight", ["vocab_size", "hidden_size"], False),
    ("model.layers.{i}.attn_norm.weight", ["hidden_size"], True),
    ("model.layers.{i}.attn.q_proj.weight", ["num_heads*head_dim", "hidden_size"], True),
    ("model.layers.{i}.attn.k_proj.weight", ["num_heads*head_dim", "hidden_size"], True),
    ("model.layers.{i}.attn.v_proj.weight", ["num_heads*head_dim", "hidden_size"], True),
    ("model.layers.{i}.attn.a_proj.weight", ["num_heads", "hidden_size"], True),
    ("model.layers.{i}.attn.a_proj.bias", ["num_heads"], True),
    ("model.layers.{i}.attn.b_proj.weight", ["num_heads", "hidden_size"], True),
    ("model.layers.{i}.attn.b_proj.bias", ["num_heads"], True),
    ("model.layers.{i}.attn.lambda_params", ["num_heads*head_dim"], True),
    ("model.layers.{i}.attn.q_conv1d.weight", ["num_heads*head_dim", "1", "conv_size"], True),
    ("model.layers.{i}.attn.k_conv1d.weight", ["num_heads*head_dim", "1", "conv_size"], True),
    ("model.layers.{i}.attn.o_norm.weight", ["head_dim"], True),
    ("model.layers.{i}.attn.o_proj.weight", ["hidden_size", "num_heads*head_dim"], True),
    ("model.layers.{i}.mlp_norm.weight", ["hidden_size"], True),
    ("model.layers.{i}.mlp.gate_proj.weight", ["intermediate_size", "hidden_size"], True),
    ("model.layers.{i}.mlp.up_proj.weight", ["intermediate_size", "hidden_size"], True),
    ("model.layers.{i}.mlp.down_proj.weight", ["hidden_size", "intermediate_size"], True),
    ("model.norm.weight", ["hidden_size"], False),
    ("lm_head.weight", ["vocab_size", "hidden_size"], False),
]


def main():
    fla = sys.argv[1]
    cfg_path = os.path.join(fla, "fla/models/mesa_net/configuration_mesa_net.py")
    tree = ast.parse(open(cfg_path).read())
    config, model_type = {}, None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "MesaNetConfig":
            for item in node.body:
                if isinstance(item, ast.Assign) and item.targets[0].id == "model_type":
                    model_type = ast.literal_eval(item.value)
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args.args[1:]
                    defaults = item.args.defaults
                    for arg, default in zip(args[len(args) - len(defaults):], defaults):
                        try:
                            config[arg.arg] = ast.literal_eval(default)
                        except ValueError:
                            config[arg.arg] = None
    assert model_type and config, "MesaNetConfig not found"
    sources = "".join(open(os.path.join(fla, p)).read() for p in (
        "fla/models/mesa_net/modeling_mesa_net.py", "fla/layers/mesa_net.py", "fla/modules/mlp.py"))
    for name, _, _ in TENSORS:
        module = name.replace(".weight", "").replace(".bias", "").split(".")[-1]
        assert f"self.{module}" in sources, f"{module} is not in FLA's MesaNet sources"
    commit_path = os.path.join(fla, "COMMIT")
    commit = open(commit_path).read().strip() if os.path.exists(commit_path) else "unknown"
    print(json.dumps({
        "fla_commit": commit,
        "config_class": "MesaNetConfig",
        "model_type": model_type,
        "architectures": ["MesaNetForCausalLM"],
        "config": config,
        "tensors": [{"name": n, "shape": s, "per_layer": p} for n, s, p in TENSORS],
    }, indent=2))


main()
