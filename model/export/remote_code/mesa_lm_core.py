# The forward pass of a mesa-trained language model in plain PyTorch: every mixer the project
# trains (Mesa, GLA, DeltaNet, Gated DeltaNet, softmax and sliding-window attention, Hawk, the
# paper's Mamba2, mLSTM, Mamba-2's SSD) and the block around them, as docs/math.md states them.
# mesa-export writes this file into a Hugging Face remote-code export (docs/export.md); it needs
# nothing but torch (1.13 or newer) and runs wherever transformers does. It is the reference, not
# the fast path: recurrences run token by token. Parameter names are the checkpoint's.
import math

import torch
import torch.nn.functional as F
from torch import nn

RESIDUAL_NORM_EPS = 1e-6  # attn_norm, mlp_norm, model.norm
HEAD_NORM_EPS = 1e-5  # the per-head output norm (o_norm)
SSM_NORM_EPS = 1e-5  # Mamba-2's gated norm
L2_NORM_EPS = 1e-6  # q and k: s / sqrt(|s|^2 + eps)
MLSTM_EPS = 1e-6  # the mLSTM denominator's eps
RESET_LOG_GAMMA = -30.0  # log forget gate at a document start (and Hawk's restart decay)
RGLRU_C = 8.0  # Hawk's decay exponent factor
ROTARY_BASE = 10000.0

# What each mixer has (model/mixers, spec/mixers.h). "qk": the shared q/k/v projections with their
# causal convolutions; "head": the block's per-head o_norm and o_proj follow the mixer.
QK_MIXERS = ("mesa", "gla", "deltanet", "gated_deltanet", "attention", "swa", "mamba2_mesa", "mlstm")
OWN_PROJECTION_MIXERS = ("hawk", "mamba2")
MIXERS = QK_MIXERS + OWN_PROJECTION_MIXERS
# The config.json keys the forward reads (mesa-export writes them all).
CONFIG_KEYS = ("vocab_size", "hidden_size", "num_heads", "head_dim", "intermediate_size", "conv_size",
               "layer_mixers", "attention_windows", "cg_steps", "cg_tol", "lambda_floor", "gamma_cap",
               "logit_softcap", "bos_token_id", "reset_at_bos", "mesa_tie_embeddings", "rnn_width",
               "ssm_inner", "ssm_head_dim", "ssm_state")


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def document_starts(tokens, bos, reset_at_bos):
    """[B, T] int64: the position of the document each position belongs to (0 without resets)."""
    b, t = tokens.shape
    pos = torch.arange(t, device=tokens.device).expand(b, t)
    if not reset_at_bos:
        return torch.zeros_like(pos)
    marked = torch.where(tokens == bos, pos, torch.zeros_like(pos))
    return torch.cummax(marked, dim=1).values


def causal_conv(x, weight, doc, bias=None):
    """Depthwise causal convolution over time: x [B, T, C], weight [C, 1, W]; tap W-1 multiplies
    the current token; taps before the position's document read zero (docs/math.md §8.6)."""
    b, t, c = x.shape
    w = weight.shape[-1]
    pos = torch.arange(t, device=x.device)
    out = torch.zeros_like(x)
    for j in range(w):
        shift = w - 1 - j
        if shift >= t:
            continue
        src = F.pad(x, (0, 0, shift, 0))[:, :t]
        valid = ((pos - shift).unsqueeze(0) >= doc).to(x.dtype).unsqueeze(-1)
        out = out + src * valid * weight[:, 0, j].to(x.dtype)
    if bias is not None:
        out = out + bias.to(x.dtype)
    return out


def silu_l2(x, eps=L2_NORM_EPS):
    s = F.silu(x)
    return s / torch.sqrt(s.pow(2).sum(-1, keepdim=True) + eps)


def rotary(x, positions):
    """Rotate-half rotary embedding of x [B, T, H, D] at integer positions [T] (angles in float64)."""
    d = x.shape[-1]
    half = d // 2
    inv = ROTARY_BASE ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / d)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv  # [T, D/2]
    cos = torch.cos(angles).to(x.dtype)[None, :, None, :]
    sin = torch.sin(angles).to(x.dtype)[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def conjugate_gradient(matrix, rhs, steps, tolerance):
    """x with matrix x = rhs, batched over leading dims (matrix [..., D, D] SPD, rhs [..., D]):
    x0 = 0, at most `steps` updates, a token whose curvature or residual is not positive stays
    where it is, and with tolerance > 0 a token stops at |r| <= tolerance |r0| (docs/math.md §2.3)."""
    x = torch.zeros_like(rhs)
    r = rhs.clone()
    p = rhs.clone()
    delta0 = (r * r).sum(-1)
    delta_old = delta0.clone()
    active = torch.ones_like(delta0, dtype=torch.bool)
    for _ in range(steps):
        w = (matrix @ p.unsqueeze(-1)).squeeze(-1)
        curvature = (p * w).sum(-1)
        ok = active & (delta_old > 0) & (curvature > 0)
        alpha = torch.where(ok, delta_old / torch.where(ok, curvature, torch.ones_like(curvature)),
                            torch.zeros_like(curvature))
        x = x + alpha.unsqueeze(-1) * p
        r = r - alpha.unsqueeze(-1) * w
        delta_new = (r * r).sum(-1)
        if tolerance > 0:
            done = ok & (torch.sqrt(delta_new) <= tolerance * torch.sqrt(delta0))
        else:
            done = torch.zeros_like(ok)
        beta = torch.where(ok, delta_new / torch.where(ok, delta_old, torch.ones_like(delta_old)),
                           torch.zeros_like(delta_old))
        p = torch.where(ok.unsqueeze(-1), r + beta.unsqueeze(-1) * p, p)
        delta_old = torch.where(ok, delta_new, delta_old)
        active = ok & ~done
        if not bool(active.any()):
            break
    return x


def mesa_operator(q, k, v, log_gamma, beta, lam, steps, tolerance, solve):
    """Per head: H_t = g H + beta k k^T, G_t = g G + beta v k^T, o_t = G_t q*_t with q* =
    (H_t + diag(lam))^-1 q_t by CG (solve) or q* = q (GLA). q, k, v [B, T, H, D]; log_gamma,
    beta [B, T, H]; lam [H, D]."""
    b, t, h, d = q.shape
    dv = v.shape[-1]
    gamma = torch.exp(log_gamma)
    hs = q.new_zeros(b, h, d, d)
    gs = q.new_zeros(b, h, dv, d)
    out = []
    chunk = max(1, min(64, (1 << 26) // max(1, b * h * d * d)))
    reg = torch.diag_embed(lam.to(q.dtype))  # [H, D, D]
    for start in range(0, t, chunk):
        end = min(t, start + chunk)
        h_states, g_states = [], []
        for s in range(start, end):
            g = gamma[:, s].unsqueeze(-1).unsqueeze(-1)
            bk = (beta[:, s].unsqueeze(-1) * k[:, s])  # [B, H, D]
            hs = g * hs + bk.unsqueeze(-1) * k[:, s].unsqueeze(-2)
            gs = g * gs + v[:, s].unsqueeze(-1) * bk.unsqueeze(-2)
            h_states.append(hs)
            g_states.append(gs)
        hc = torch.stack(h_states, dim=2)  # [B, H, C, D, D]
        gc = torch.stack(g_states, dim=2)
        qc = q[:, start:end].transpose(1, 2)  # [B, H, C, D]
        if solve:
            qc = conjugate_gradient(hc + reg[None, :, None], qc, steps, tolerance)
        out.append((gc @ qc.unsqueeze(-1)).squeeze(-1).transpose(1, 2))
    return torch.cat(out, dim=1)


def delta_operator(q, k, v, log_gamma, beta):
    """S_t = g S (I - beta k k^T) + beta v k^T, o_t = S_t q_t, per head (log_gamma None: g = 1)."""
    b, t, h, d = q.shape
    s = q.new_zeros(b, h, v.shape[-1], d)
    out = []
    for i in range(t):
        if log_gamma is not None:
            s = torch.exp(log_gamma[:, i]).unsqueeze(-1).unsqueeze(-1) * s
        kt = k[:, i]
        pred = (s @ kt.unsqueeze(-1)).squeeze(-1)
        s = s + (beta[:, i].unsqueeze(-1) * (v[:, i] - pred)).unsqueeze(-1) * kt.unsqueeze(-2)
        out.append((s @ q[:, i].unsqueeze(-1)).squeeze(-1))
    return torch.stack(out, dim=1)


def attention_operator(q, k, v, window, doc):
    """Causal softmax attention, scale 1/sqrt(D); window W > 0: keys t-W+1..t; keys before the
    query's document are masked."""
    b, t, h, d = q.shape
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(d)
    tq = torch.arange(t, device=q.device).view(t, 1)
    tk = torch.arange(t, device=q.device).view(1, t)
    allowed = (tk <= tq).unsqueeze(0)
    if window > 0:
        allowed = allowed & (tk > tq - window).unsqueeze(0)
    allowed = allowed & (tk.unsqueeze(0) >= doc.unsqueeze(-1))  # [B, T, T]
    scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    return torch.einsum("bhts,bshd->bthd", torch.softmax(scores, dim=-1), v)


def mlstm_operator(q, k, v, f_pre, i_pre, reset):
    """xLSTM's stabilised matrix memory (docs/math.md §8.9); k already scaled by 1/sqrt(D)."""
    b, t, h, d = q.shape
    c = q.new_zeros(b, h, v.shape[-1], d)
    n = q.new_zeros(b, h, d)
    m = q.new_zeros(b, h)
    out = []
    for i in range(t):
        lf = F.logsigmoid(f_pre[:, i])
        ip = i_pre[:, i]
        r = reset[:, i].unsqueeze(-1)  # [B, 1]
        m_new = torch.where(r, ip, torch.maximum(lf + m, ip))
        fp = torch.where(r, torch.zeros_like(lf), torch.exp(lf + m - m_new))
        ig = torch.exp(ip - m_new)
        m = m_new
        c = fp.unsqueeze(-1).unsqueeze(-1) * c + \
            ig.unsqueeze(-1).unsqueeze(-1) * v[:, i].unsqueeze(-1) * k[:, i].unsqueeze(-2)
        n = fp.unsqueeze(-1) * n + ig.unsqueeze(-1) * k[:, i]
        num = (c @ q[:, i].unsqueeze(-1)).squeeze(-1)
        den = torch.maximum((n * q[:, i]).sum(-1).abs(), torch.exp(-m)) + MLSTM_EPS
        out.append(num / den.unsqueeze(-1))
    return torch.stack(out, dim=1)


class Linear(nn.Module):
    """A weight [out, in] (and a bias) named as the checkpoint names them; no initialisation:
    every value comes from the checkpoint."""

    def __init__(self, n_out, n_in, bias=False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))
        self.bias = nn.Parameter(torch.empty(n_out)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype),
                        None if self.bias is None else self.bias.to(x.dtype))


class Conv(nn.Module):
    def __init__(self, channels, width, bias=False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, width))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None


class Norm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))


class QkMixer(nn.Module):
    """The mixers that share q, k, v with short convolutions on q and k (docs/math.md §1.2)."""

    def __init__(self, cfg, kind):
        super().__init__()
        c, hd, h, w = cfg["hidden_size"], cfg["num_heads"] * cfg["head_dim"], cfg["num_heads"], cfg["conv_size"]
        self.kind = kind
        self.q_proj, self.k_proj, self.v_proj = Linear(hd, c), Linear(hd, c), Linear(hd, c)
        self.q_conv1d, self.k_conv1d = Conv(hd, w), Conv(hd, w)
        self.forget = kind in ("mesa", "gla", "gated_deltanet", "mamba2_mesa", "mlstm")
        self.input = kind in ("mesa", "gla", "deltanet", "gated_deltanet", "mlstm")
        if self.forget:
            self.a_proj = Linear(h, c, bias=True)
        if self.input:
            self.b_proj = Linear(h, c, bias=True)
        if kind in ("mesa", "gla"):
            self.lambda_params = nn.Parameter(torch.empty(hd))
        self.o_norm = Norm(cfg["head_dim"])
        self.o_proj = Linear(c, hd)

    def forward(self, x, cfg, layer, doc, positions):
        b, t, _ = x.shape
        h, d = cfg["num_heads"], cfg["head_dim"]
        q = causal_conv(self.q_proj(x), self.q_conv1d.weight, doc).view(b, t, h, d)
        k = causal_conv(self.k_proj(x), self.k_conv1d.weight, doc).view(b, t, h, d)
        v = self.v_proj(x).view(b, t, h, d)
        start = doc == torch.arange(t, device=x.device).unsqueeze(0)  # [B, T]
        kind = self.kind
        if kind in ("attention", "swa"):
            o = attention_operator(rotary(q, positions), rotary(k, positions), v,
                                   cfg["attention_windows"][layer], doc)
        elif kind == "mlstm":
            reset = start & (torch.arange(t, device=x.device) > 0).unsqueeze(0)
            o = mlstm_operator(q, k / math.sqrt(d), v, self.a_proj(x), self.b_proj(x), reset)
        else:
            q, k = silu_l2(q), silu_l2(k)
            beta = torch.sigmoid(self.b_proj(x)) if self.input else torch.ones(b, t, h, dtype=x.dtype,
                                                                                device=x.device)
            log_gamma = None
            if self.forget:
                cap = cfg["gamma_cap"]
                log_gamma = -F.softplus(-self.a_proj(x)) + torch.log1p(-cap * beta * beta)
            if cfg["reset_at_bos"]:
                if log_gamma is None:
                    log_gamma = torch.zeros_like(beta)
                log_gamma = torch.where(start.unsqueeze(-1), torch.full_like(log_gamma, RESET_LOG_GAMMA),
                                        log_gamma)
            if kind in ("deltanet", "gated_deltanet"):
                o = delta_operator(q, k, v, log_gamma, beta)
            else:
                if kind == "mesa":
                    lam = (cfg["lambda_floor"] + F.softplus(self.lambda_params.to(x.dtype))).view(h, d)
                else:
                    lam = torch.ones(h, d, dtype=x.dtype, device=x.device)
                o = mesa_operator(q, k, v, log_gamma, beta, lam, cfg["cg_steps"], cfg["cg_tol"],
                                  solve=kind == "mesa")
        o = rms_norm(o, self.o_norm.weight.to(x.dtype), HEAD_NORM_EPS)
        return self.o_proj(o.reshape(b, t, h * d))


class RgLru(nn.Module):
    def __init__(self, heads, width):
        super().__init__()
        block = width // heads
        self.a_gate = BlockDiagonal(heads, block)
        self.input_gate = BlockDiagonal(heads, block)
        self.a_param = nn.Parameter(torch.empty(width))


class BlockDiagonal(nn.Module):
    def __init__(self, heads, block):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, block, block))  # [head, out, in]
        self.bias = nn.Parameter(torch.empty(heads * block))

    def forward(self, x):
        h, blk, _ = self.weight.shape
        y = torch.einsum("bthi,hoi->btho", x.unflatten(-1, (h, blk)), self.weight.to(x.dtype))
        return y.flatten(-2) + self.bias.to(x.dtype)


class Hawk(nn.Module):
    """Griffin's recurrent block around the RG-LRU (docs/math.md §8.8)."""

    def __init__(self, cfg):
        super().__init__()
        c, r = cfg["hidden_size"], cfg["rnn_width"]
        self.linear_x, self.linear_y = Linear(r, c, bias=True), Linear(r, c, bias=True)
        self.conv_1d = Conv(r, cfg["conv_size"], bias=True)
        self.rg_lru = RgLru(cfg["num_heads"], r)
        self.linear_out = Linear(c, r, bias=True)

    def forward(self, x, cfg, layer, doc, positions):
        b, t, _ = x.shape
        y = F.gelu(self.linear_y(x), approximate="tanh")
        u = causal_conv(self.linear_x(x), self.conv_1d.weight, doc, self.conv_1d.bias)
        r = torch.sigmoid(self.rg_lru.a_gate(u))
        i = torch.sigmoid(self.rg_lru.input_gate(u))
        log_a = -RGLRU_C * r * F.softplus(self.rg_lru.a_param.to(x.dtype))
        pos = torch.arange(t, device=x.device).unsqueeze(0)
        restart = ((doc == pos) | (pos == 0)).unsqueeze(-1)
        log_a = torch.where(restart, torch.full_like(log_a, RESET_LOG_GAMMA), log_a)
        a = torch.exp(log_a)
        mult = torch.where(restart, torch.ones_like(a), torch.sqrt(-torch.expm1(2 * log_a)))
        write = mult * i * u
        state = x.new_zeros(b, u.shape[-1])
        hs = []
        for s in range(t):
            state = a[:, s] * state + write[:, s]
            hs.append(state)
        return self.linear_out(torch.stack(hs, dim=1) * y)


class Mamba2(nn.Module):
    """Mamba-2's block around the SSD (docs/math.md §8.10), one group of B and C."""

    def __init__(self, cfg):
        super().__init__()
        c, inner, n = cfg["hidden_size"], cfg["ssm_inner"], cfg["ssm_state"]
        heads = inner // cfg["ssm_head_dim"]
        self.in_proj = Linear(2 * inner + 2 * n + heads, c)
        self.conv1d = Conv(inner + 2 * n, cfg["conv_size"], bias=True)
        self.dt_bias = nn.Parameter(torch.empty(heads))
        self.A_log = nn.Parameter(torch.empty(heads))
        self.D = nn.Parameter(torch.empty(heads))
        self.norm = Norm(inner)
        self.out_proj = Linear(c, inner)

    def forward(self, x, cfg, layer, doc, positions):
        b, t, _ = x.shape
        inner, n, p = cfg["ssm_inner"], cfg["ssm_state"], cfg["ssm_head_dim"]
        heads = inner // p
        zxbcdt = self.in_proj(x)
        z = zxbcdt[..., :inner]
        xbc = F.silu(causal_conv(zxbcdt[..., inner:2 * inner + 2 * n], self.conv1d.weight, doc,
                                 self.conv1d.bias))
        xs = xbc[..., :inner].unflatten(-1, (heads, p))
        bs, cs = xbc[..., inner:inner + n], xbc[..., inner + n:]
        dt = F.softplus(zxbcdt[..., 2 * inner + 2 * n:] + self.dt_bias.to(x.dtype))  # [B, T, Hm]
        a = torch.exp(dt * -torch.exp(self.A_log.to(x.dtype)))
        start = (doc == torch.arange(t, device=x.device).unsqueeze(0)).unsqueeze(-1)
        a = torch.where(start, torch.zeros_like(a), a)
        state = x.new_zeros(b, heads, p, n)
        ys = []
        for s in range(t):
            state = a[:, s, :, None, None] * state + \
                (dt[:, s, :, None] * xs[:, s]).unsqueeze(-1) * bs[:, s, None, None, :]
            ys.append((state @ cs[:, s, None, :, None]).squeeze(-1))
        y = torch.stack(ys, dim=1) + self.D.to(x.dtype)[:, None] * xs
        g = y.flatten(-2) * F.silu(z)
        return self.out_proj(rms_norm(g, self.norm.weight.to(x.dtype), SSM_NORM_EPS))


class Mlp(nn.Module):
    def __init__(self, c, f):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = Linear(f, c), Linear(f, c), Linear(c, f)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        c = cfg["hidden_size"]
        self.attn_norm = Norm(c)
        if kind == "hawk":
            self.attn = Hawk(cfg)
        elif kind == "mamba2":
            self.attn = Mamba2(cfg)
        else:
            self.attn = QkMixer(cfg, kind)
        self.mlp_norm = Norm(c)
        self.mlp = Mlp(c, cfg["intermediate_size"])

    def forward(self, e, cfg, layer, doc, positions):
        x = rms_norm(e, self.attn_norm.weight.to(e.dtype), RESIDUAL_NORM_EPS)
        e = e + self.attn(x, cfg, layer, doc, positions)
        return e + self.mlp(rms_norm(e, self.mlp_norm.weight.to(e.dtype), RESIDUAL_NORM_EPS))


class Backbone(nn.Module):
    """model.embeddings, model.layers.N, model.norm: the checkpoint's names below "model."."""

    def __init__(self, cfg):
        super().__init__()
        check_config(cfg)
        self.embeddings = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Block(cfg, kind) for kind in cfg["layer_mixers"])
        self.norm = Norm(cfg["hidden_size"])

    def forward(self, tokens, cfg, compute_dtype=torch.float32):
        b, t = tokens.shape
        doc = document_starts(tokens, cfg["bos_token_id"], cfg["reset_at_bos"])
        positions = torch.arange(t, device=tokens.device)
        e = self.embeddings.weight.to(compute_dtype)[tokens]
        if cfg["mesa_tie_embeddings"]:
            e = e * math.sqrt(cfg["hidden_size"])
        for layer, block in enumerate(self.layers):
            e = block(e, cfg, layer, doc, positions)
        return rms_norm(e, self.norm.weight.to(compute_dtype), RESIDUAL_NORM_EPS)


def logits_from_hidden(hidden, backbone, lm_head, cfg):
    """The soft-capped logits: tied head = the embedding itself, else lm_head.weight."""
    head = backbone.embeddings.weight if lm_head is None else lm_head.weight
    z = F.linear(hidden, head.to(hidden.dtype))
    cap = cfg["logit_softcap"]
    return cap * torch.tanh(z / cap) if cap > 0 else z


def check_config(cfg):
    """ValueError naming the key for a configuration this file does not compute."""
    for key in CONFIG_KEYS:
        if key not in cfg:
            raise ValueError("config.json has no %r (a mesa-export remote-code config needs it)" % key)
    for i, kind in enumerate(cfg["layer_mixers"]):
        if kind not in MIXERS:
            raise ValueError("layer_mixers[%d] is %r; this code knows %s" % (i, kind, ", ".join(MIXERS)))
    if len(cfg["attention_windows"]) != len(cfg["layer_mixers"]):
        raise ValueError("attention_windows must have one entry per layer")


class MesaLM(nn.Module):
    """The whole model without transformers: MesaLM(cfg)(tokens) -> logits [B, T, V]. cfg is the
    export's config.json as a dict; load the export's tensors with load_state_dict."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = None if cfg["mesa_tie_embeddings"] else Linear(cfg["vocab_size"], cfg["hidden_size"])

    def forward(self, tokens, compute_dtype=torch.float32):
        hidden = self.model(tokens, self.cfg, compute_dtype)
        return logits_from_hidden(hidden, self.model, self.lm_head, self.cfg)
