//! topolet-nri: the NRI wire layer (schema, ttrpc bindings, multiplexer, plugin stub).
