"""The application: ``App`` (the registry of what an app declares), its settings
(``app.conf``), and what it registers besides agents and pipelines: services, web views,
signals and cron schedules.

Owns: ``application`` (App), ``conf`` (Settings: the settings table), ``services``,
``views``, ``signals``, ``crontab``.
May import: ``faust``, ``dsl``, ``agents``, ``topics`` and every layer below them; never
``runtime``, ``cli``, ``web``, ``spark`` or ``testing`` (they run an app; what an app needs of
them at run time is installed through ``topics.ports``).
"""
