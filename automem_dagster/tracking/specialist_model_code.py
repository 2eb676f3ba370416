"""The code mlflow runs to build a logged memory specialist when it is loaded (models from code:
the model is this file's ``set_model``, not a pickle); see ``specialist_model.py``."""

from mlflow.models import set_model

from automem_dagster.tracking.specialist_model import SpecialistModel

set_model(SpecialistModel())
