"""`torch.autograd` for tinygrad_attn: `import tinygrad_attn.autograd` where a PyTorch program imports torch.autograd.

- `grad` and `backward`: the backward pass, returning gradients or accumulating them into `.grad`;
  `create_graph=True` gives gradients that can be differentiated again.
- `Function` (ops written with tensors, their backward too), `once_differentiable`, and the deprecated
  `Variable`.
- `gradcheck` and `gradgradcheck`: first and second derivatives against finite differences.
- `functional`: `jacobian`, `hessian`, `vjp`, `jvp`, `hvp`, `vhp`.
- grad mode: `no_grad`, `enable_grad`, `set_grad_enabled`, `inference_mode`, `is_grad_enabled`.

The engine itself is `tinygrad_attn/engine.py`; the rules it runs are `ops.py` and `fused.py`.
"""

from ..debug import detect_anomaly
from ..engine import Context, RemovableHandle, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from . import functional
from .backward import Variable, backward, grad
from .function import Function, FunctionCtx, once_differentiable
from .gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = ["Context", "Function", "FunctionCtx", "GradcheckError", "RemovableHandle", "Variable", "backward",
           "detect_anomaly", "enable_grad", "functional", "grad", "gradcheck", "gradgradcheck", "inference_mode",
           "is_grad_enabled", "no_grad", "once_differentiable", "set_grad_enabled"]
