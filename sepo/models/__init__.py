"""Language models sepo builds or loads: the tiny local test model (`sepo.models.tiny`,
`init_tiny_model`)."""


def quiet_library_progress() -> None:
    """Switch off transformers' and huggingface_hub's own tqdm bars ("Loading weights",
    "Writing model shards", downloads): without a terminal they are raw noise around sepo's own
    progress lines, which do not use them."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        return
    disable_progress_bars()
