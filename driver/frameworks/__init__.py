"""Framework plug-ins, one module each (see ``base.Framework``)."""
