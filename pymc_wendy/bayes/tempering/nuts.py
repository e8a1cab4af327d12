"""One multinomial NUTS transition (generalised no-U-turn criterion) with identity metric: the
caller moves in coordinates whitened by its mass matrix."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_MAX_ENERGY_ERROR = 1000.0


@dataclass
class _Leaf:
    y: np.ndarray
    p: np.ndarray
    lp: float
    g: np.ndarray
    info: tuple = ()  # what the caller's function returned besides lp and g


@dataclass
class _Subtree:
    beg: _Leaf  # the point next to where the tree was extended from
    end: _Leaf  # the far end
    sample: _Leaf
    logw: float
    rho: np.ndarray
    valid: bool
    n_steps: int = 0
    sum_accept: float = 0.0
    diverging: bool = False


def _criterion(p_minus, p_plus, rho) -> bool:
    return bool(p_plus @ rho > 0 and p_minus @ rho > 0)


class NUTS:
    """One multinomial NUTS transition with identity metric (the caller whitens)."""

    def __init__(self, fun, eps: float, rng: np.random.Generator, max_depth: int):
        self.fun = fun  # y -> (lp, grad, info)
        self.eps = eps
        self.rng = rng
        self.max_depth = max_depth

    def _leapfrog(self, z: _Leaf, direction: int) -> _Leaf:
        h = direction * self.eps
        p = z.p + 0.5 * h * z.g
        y = z.y + h * p
        lp, g, info = self.fun(y)
        if not np.isfinite(lp):
            return _Leaf(y, p, -np.inf, np.zeros_like(y))
        return _Leaf(y, p + 0.5 * h * g, lp, g, info)

    def _build(self, z: _Leaf, depth: int, direction: int, E0: float) -> _Subtree:
        if depth == 0:
            leaf = self._leapfrog(z, direction)
            E = -leaf.lp + 0.5 * leaf.p @ leaf.p if np.isfinite(leaf.lp) else np.inf
            dE = E0 - E  # log weight relative to the start
            diverging = not (-dE < _MAX_ENERGY_ERROR)
            return _Subtree(
                beg=leaf,
                end=leaf,
                sample=leaf,
                logw=dE if np.isfinite(dE) else -np.inf,
                rho=leaf.p.copy(),
                valid=not diverging,
                n_steps=1,
                sum_accept=math.exp(min(dE, 0.0)) if np.isfinite(dE) else 0.0,
                diverging=diverging,
            )
        init = self._build(z, depth - 1, direction, E0)
        if not init.valid:
            return init
        final = self._build(init.end, depth - 1, direction, E0)
        out = _Subtree(
            beg=init.beg,
            end=final.end,
            sample=init.sample,
            logw=np.logaddexp(init.logw, final.logw),
            rho=init.rho + final.rho,
            valid=final.valid,
            n_steps=init.n_steps + final.n_steps,
            sum_accept=init.sum_accept + final.sum_accept,
            diverging=final.diverging,
        )
        if not final.valid:
            return out
        if math.log(self.rng.random()) < final.logw - out.logw:
            out.sample = final.sample
        out.valid = (
            _criterion(init.beg.p, final.end.p, out.rho)
            and _criterion(init.beg.p, final.beg.p, init.rho + final.beg.p)
            and _criterion(init.end.p, final.end.p, final.rho + init.end.p)
        )
        return out

    def transition(self, y, lp, g) -> tuple[_Leaf, dict]:
        p0 = self.rng.standard_normal(y.size)
        z0 = _Leaf(y, p0, lp, g)
        E0 = -lp + 0.5 * p0 @ p0
        minus = plus = z0
        sample = z0
        logw = 0.0
        rho = p0.copy()
        n_steps, sum_accept, diverging, depth = 0, 0.0, False, 0
        while depth < self.max_depth:
            forward = self.rng.random() < 0.5
            sub = self._build(plus if forward else minus, depth, 1 if forward else -1, E0)
            n_steps += sub.n_steps
            sum_accept += sub.sum_accept
            depth += 1
            if not sub.valid:
                diverging = sub.diverging
                break
            if math.log(self.rng.random()) < sub.logw - logw:
                sample = sub.sample
            logw = np.logaddexp(logw, sub.logw)
            if forward:
                bck_rho, fwd_rho = rho, sub.rho
                bck_beg, bck_end, fwd_beg, fwd_end = minus.p, plus.p, sub.beg.p, sub.end.p
                plus = sub.end
            else:
                bck_rho, fwd_rho = sub.rho, rho
                bck_beg, bck_end, fwd_beg, fwd_end = sub.end.p, sub.beg.p, minus.p, plus.p
                minus = sub.end
            rho = bck_rho + fwd_rho
            if not (
                _criterion(bck_beg, fwd_end, rho)
                and _criterion(bck_beg, fwd_beg, bck_rho + fwd_beg)
                and _criterion(bck_end, fwd_end, fwd_rho + bck_end)
            ):
                break
        stats = {
            "accept": sum_accept / max(n_steps, 1),
            "n_steps": n_steps,
            "depth": depth,
            "diverging": diverging,
            "energy": -sample.lp + 0.5 * sample.p @ sample.p,
        }
        return sample, stats
