"""``python -m trainer``: the image entrypoint (see ``contract.ENTRYPOINT``)."""

import os

# tf-keras (Keras 2) must be selected before TensorFlow is imported anywhere: Keras 3 model code
# fails under MultiWorkerMirroredStrategy with 2+ workers (keras-team/keras#20585).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from trainer.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
