"""Client side of SSR for SGLang frontend programs (``@sgl.function``, see ``programs/``).

* :class:`SSREndpoint` -- token-exact ``RuntimeEndpoint``; hands drafts to the server per request
  (``custom_params`` ``ssr_draft_<k>``) or verifies them on the client against a stock server;
* :func:`ssr_gen` -- ``sgl.gen`` with SSR draft answers for that one request;
* :func:`speculative_generate` -- client-side greedy verification with the core's proposer, one
  prefill request per step (no frontend needed).
"""

from .client import ServerClient, VerifyStats, speculative_generate
from .endpoint import NO_SERVER_FORKS, SSR_REQUEST_VAR, SSREndpoint, ssr_gen

__all__ = ["ServerClient", "VerifyStats", "speculative_generate", "SSREndpoint", "ssr_gen",
           "SSR_REQUEST_VAR", "NO_SERVER_FORKS"]
