"""NumPy references of the recurrent ops (recurrent.py): each recurrence as its definition, one token
at a time in float64, with no chunking or other rearrangement, so that the runtime's chunked forms
(snf/runtime/recurrent.py) have something plainly right to be checked against.
"""

from __future__ import annotations

from .lazy_numpy import np


def _f64(t):
    return None if t is None else np.asarray(t, dtype=np.float64)


def _conv_padded(x, weight, state):
    """concat(state, x) on the time axis: [B, K-1+T, C] (zeros for a missing state)."""
    x = _f64(x)
    k = weight.shape[-1]
    if state is None:
        state = np.zeros((x.shape[0], k - 1, x.shape[2]))
    return np.concatenate([_f64(state), x], axis=1)


def np_causal_conv1d(x, weight, bias=None, state=None):
    """Depthwise causal conv of x [B, T, C] by weight [C, 1, K]: y[b, t, c] = bias[c] +
    sum_j weight[c, 0, j] * xp[b, t + j, c], where xp is the state [B, K-1, C] followed by x."""
    xp, w = _conv_padded(x, weight, state), _f64(weight)
    b, t, c = np.shape(x)
    k = w.shape[-1]
    y = np.zeros((b, t, c)) + (0.0 if bias is None else _f64(bias))
    for i in range(t):
        for j in range(k):
            y[:, i] += w[:, 0, j] * xp[:, i + j]
    return y


def np_causal_conv1d_state(x, weight, bias=None, state=None):
    """The last K-1 time rows of the state followed by x: [B, K-1, C], the state after x."""
    xp = _conv_padded(x, weight, state)
    return xp[:, xp.shape[1] - (weight.shape[-1] - 1):].copy()


def _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state):
    x, dt, A, B, C = (_f64(t) for t in (x, dt, A, B, C))
    bt, t, h, p = x.shape
    n = B.shape[-1]
    group = np.arange(h) // (h // B.shape[2])  # the group of each head
    if dt_bias is not None:
        dt = dt + _f64(dt_bias)
    if dt_softplus:
        dt = np.logaddexp(0.0, dt)
    dt = np.clip(dt, -np.inf if dt_min is None else dt_min, np.inf if dt_max is None else dt_max)
    s = np.zeros((bt, h, p, n)) if state is None else _f64(state).copy()
    y = np.zeros((bt, t, h, p))
    for i in range(t):
        b_t, c_t = B[:, i][:, group], C[:, i][:, group]  # [Bt, H, N]
        decay = np.exp(dt[:, i] * A)[:, :, None, None]
        s = decay * s + dt[:, i][:, :, None, None] * x[:, i][:, :, :, None] * b_t[:, :, None, :]
        y[:, i] = np.einsum("bhpn,bhn->bhp", s, c_t)
        if D is not None:
            y[:, i] += _f64(D)[:, None] * x[:, i]
    return y, s


def np_ssd_scan(x, dt, A, B, C, D=None, dt_bias=None, dt_softplus=True, dt_min=0.0, dt_max=None, state=None):
    """Mamba2's selective scan of x [Bt, T, H, P]: per step, dt' = clip(softplus(dt + dt_bias)),
    h = exp(dt' A) h + dt' x B^T, y = h C + D x. Returns y [Bt, T, H, P]."""
    return _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state)[0]


def np_ssd_state(x, dt, A, B, C, D=None, dt_bias=None, dt_softplus=True, dt_min=0.0, dt_max=None, state=None):
    """The state h [Bt, H, P, N] after np_ssd_scan with the same arguments."""
    return _ssd(x, dt, A, B, C, D, dt_bias, dt_softplus, dt_min, dt_max, state)[1]


def _l2norm(x):
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + 1e-6)


def _delta(q, k, v, g, beta, state, scale, l2norm):
    q, k, v, g, beta = (_f64(t) for t in (q, k, v, g, beta))
    bt, t, hk, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    head = np.arange(hv) // (hv // hk)  # the q/k head of each value head
    q, k = q[:, :, head], k[:, :, head]
    if l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q * (1.0 / np.sqrt(kd) if scale is None else scale)
    s = np.zeros((bt, hv, kd, vd)) if state is None else _f64(state).copy()
    o = np.zeros((bt, t, hv, vd))
    for i in range(t):
        # one decay per head [Bt, Hv], or per head and key channel [Bt, Hv, Kd] (Kimi Delta Attention)
        s = s * (np.exp(g[:, i])[:, :, None, None] if g.ndim == 3 else np.exp(g[:, i])[:, :, :, None])
        mem = np.einsum("bhk,bhkv->bhv", k[:, i], s)
        delta = (v[:, i] - mem) * beta[:, i][:, :, None]
        s = s + k[:, i][:, :, :, None] * delta[:, :, None, :]
        o[:, i] = np.einsum("bhk,bhkv->bhv", q[:, i], s)
    return o, s


def np_gated_delta_rule(q, k, v, g, beta, state=None, scale=None, l2norm=True):
    """The gated delta rule over q, k [Bt, T, Hk, Kd], v [Bt, T, Hv, Vd]: per step S = S exp(g),
    S = S + k ((v - k^T S) beta)^T, o = q^T S (q, k L2-normalised if `l2norm`, q scaled by `scale`,
    1/sqrt(Kd) by default); g [Bt, T, Hv] scales S whole, g [Bt, T, Hv, Kd] its rows (one decay per
    key channel). Returns o [Bt, T, Hv, Vd]."""
    return _delta(q, k, v, g, beta, state, scale, l2norm)[0]


def np_gated_delta_state(q, k, v, g, beta, state=None, scale=None, l2norm=True):
    """The state S [Bt, Hv, Kd, Vd] after np_gated_delta_rule with the same arguments."""
    return _delta(q, k, v, g, beta, state, scale, l2norm)[1]
