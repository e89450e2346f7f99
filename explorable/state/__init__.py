"""The explorable's data: the controls and the runs they give, with no Panel import (the DataStore)."""
