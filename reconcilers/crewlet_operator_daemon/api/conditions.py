"""The crewlet.ai API's vocabulary: the condition types its statuses carry and the reasons
``Accepted=False`` gives.

They are API, read by people, ``kubectl`` columns and other controllers, so they sit with the
models, below every module that decides them: this module imports nothing of the operator.
:mod:`crewlet_operator_daemon.inputs` says in which order the refusals are judged.
"""

# --- Condition types -------------------------------------------------------------------------

ACCEPTED = "Accepted"
"""A Company's condition: the company runs as asked."""
READY = "Ready"
"""A Company's condition: the company's data pod is ready."""
SUSPENDED = "Suspended"
"""A Company's condition: ``spec.suspend`` scaled the company to zero."""
REFERENCES_RESOLVED = "ReferencesResolved"
"""An EngineClass's condition: every Secret key the class references exists."""

# --- Why a company is refused (Accepted=False) -------------------------------------------------

INVALID_SPEC = "InvalidSpec"
"""The Company does not fit its model (stored before the CRD tightened)."""
INVALID_NAME = "InvalidName"
"""The Company's name cannot name its children."""
CLASS_NOT_FOUND = "ClassNotFound"
"""No EngineClass of the name the company gives."""
INVALID_CLASS = "InvalidClass"
"""The class cannot be run as written (or the API server refused a child rendered from it)."""
CLASS_NOT_ALLOWED = "ClassNotAllowed"
"""The class's ``allowedNamespaces`` does not admit the company's namespace."""
DOWNGRADE_REFUSED = "DowngradeRefused"
"""The class's image is older than the company's data has run."""
SECRET_UNREADABLE = "SecretUnreadable"
"""The class references a Secret the operator may not read (also ``ReferencesResolved=False``)."""
SECRET_NOT_FOUND = "SecretNotFound"
"""The class references a Secret, or a key of one, that does not exist (also
``ReferencesResolved=False``)."""
ENGINE_CONFIG_INVALID = "EngineConfigInvalid"
"""A rendered crewlet.yaml the engine's schema refuses: a bug of the operator."""
HOSTNAME_TAKEN = "HostnameTaken"
"""Another Company, or a route the operator did not write on the same Gateway or IngressClass,
holds the webhook hostname this one asks for."""
HOSTNAME_NOT_ALLOWED = "HostnameNotAllowed"
"""The class's ``exposure.allowedHostnames`` does not give the company the webhook hostname it
asks for."""
NAME_TAKEN = "NameTaken"
"""An object the operator did not make holds the name of one of the company's objects."""
