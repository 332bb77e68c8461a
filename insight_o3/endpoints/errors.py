"""The errors a run expects and records instead of raising.

An API failure after the SDK's own retries (``openai.APIError``: status errors, connection errors and
timeouts, malformed responses), an image that cannot be used (our :class:`~insight_o3.imaging.images.ImageError`,
Pillow's ``UnidentifiedImageError`` — an ``OSError`` — and ``DecompressionBombError``) and a malformed
value (``ValueError``, which includes ``json.JSONDecodeError``) become ``failed`` records with a
reason. Anything else — ``TypeError``, ``AttributeError``, ``KeyError`` … — is a programming error
and propagates, so a bug is a traceback rather than a run of quietly failed records.
"""

from __future__ import annotations

import openai
from PIL import Image

from ..imaging.images import ImageError

#: ``openai.APITimeoutError`` and ``APIConnectionError`` are ``APIError`` subclasses; the builtin
#: ``TimeoutError`` (= ``asyncio.TimeoutError``) covers an ``asyncio.wait_for`` around a request.
API_ERRORS: tuple[type[Exception], ...] = (openai.APIError, TimeoutError)
IMAGE_ERRORS: tuple[type[Exception], ...] = (ImageError, OSError, Image.DecompressionBombError)
#: What a driver turns into a ``failed`` result.
EXPECTED_ERRORS: tuple[type[Exception], ...] = API_ERRORS + IMAGE_ERRORS + (ValueError,)
