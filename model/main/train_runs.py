"""Reading mesa-train's outputs in the end-to-end tests (mesa_train_dp_test, mesa_train_cp_test):
events (JSON lines of mesa.v1.TrainerEvent), losses by step, checkpoint weights, and comparisons
that print the worst difference and fail past a bound."""
import array
import json
import struct


def events(path, kind):
    """The payloads of one kind of event."""
    return [e[kind] for e in map(json.loads, open(path)) if kind in e]


def losses(path):
    return {int(e["step"]): e["loss"] for e in events(path, "step") if not e["skipped"]}


def val_losses(path):
    return {int(e["step"]): e["metrics"]["val_loss"] for e in events(path, "eval")}


def weights(ckpt_root):
    """(latest step directory name, {tensor name: float array}) of a checkpoint root."""
    step = open(ckpt_root + "/latest").read().strip()
    with open(ckpt_root + "/" + step + "/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = array.array("f", data[a:b])
    return step, out


def compare_losses(what, a, b, rel):
    assert a.keys() == b.keys() and len(a) > 0, (what, sorted(a), sorted(b))
    worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in a)
    assert worst <= rel, (what, worst, a, b)
    print("%-36s %d values, worst relative difference %.2e" % (what, len(a), worst))


def compare_weights(what, a, b, max_abs, step):
    """Both checkpoint roots end at `step` (e.g. "step_00000008") with weights within max_abs."""
    (sa, wa), (sb, wb) = weights(a), weights(b)
    assert sa == sb == step, (sa, sb)
    assert wa.keys() == wb.keys()
    worst, total, count = 0.0, 0.0, 0
    for name in wa:
        for x, y in zip(wa[name], wb[name]):
            d = abs(x - y)
            worst = max(worst, d)
            total += d
            count += 1
    assert worst <= max_abs, (what, worst)
    print("%-36s %d weights, max |diff| %.2e, mean %.2e" % (what, count, worst, total / count))
