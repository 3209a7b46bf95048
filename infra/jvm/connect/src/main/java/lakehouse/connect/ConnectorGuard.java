package lakehouse.connect;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import jakarta.ws.rs.container.ContainerRequestContext;
import jakarta.ws.rs.container.ContainerRequestFilter;
import jakarta.ws.rs.container.ContainerResponseContext;
import jakarta.ws.rs.container.ContainerResponseFilter;
import jakarta.ws.rs.core.MediaType;
import jakarta.ws.rs.core.PathSegment;
import jakarta.ws.rs.core.Response;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Checks each connector config the REST API receives (create, update, patch, validate) and
 * what validate sends back.
 *
 * <ul>
 *   <li>The connector class must be one the project runs.</li>
 *   <li>A {@code file} setting (the FileStream connectors' source or sink) must be an absolute
 *       path that, with every link and {@code ..} resolved, lies in one of the allowed
 *       folders; otherwise the request is answered 400 naming the field, and nothing is
 *       stored or started.</li>
 *   <li>Validate answers each field with its value after config providers resolved it; a
 *       field sent as a reference ({@code ${env:...}}) gets the reference back instead, so a
 *       secret never leaves the worker.</li>
 * </ul>
 *
 * <p>The check runs when the config arrives: a link put in an allowed folder later, pointing
 * out of it, is followed by the connector (the folder's owner can do that; others cannot).
 */
final class ConnectorGuard implements ContainerRequestFilter, ContainerResponseFilter {
    static final String FILE = "file";
    private static final String REFERENCES = ConnectorGuard.class.getName() + ".references";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final List<Path> fileDirs;
    private final Set<String> connectorClasses;

    ConnectorGuard(List<Path> fileDirs, Set<String> connectorClasses) {
        this.fileDirs = fileDirs;
        this.connectorClasses = connectorClasses;
    }

    private enum Call { CREATE, CONFIG, VALIDATE }

    private static Call call(ContainerRequestContext request) {
        String method = request.getMethod();
        List<PathSegment> path = request.getUriInfo().getPathSegments();
        String first = path.isEmpty() ? "" : path.get(0).getPath();
        if ("connectors".equals(first)) {
            if (path.size() == 1 && "POST".equals(method)) {
                return Call.CREATE;
            }
            if (path.size() == 3 && "config".equals(path.get(2).getPath())
                    && ("PUT".equals(method) || "PATCH".equals(method))) {
                return Call.CONFIG;
            }
        }
        if ("connector-plugins".equals(first) && path.size() == 4 && "PUT".equals(method)
                && "config".equals(path.get(2).getPath())
                && "validate".equals(path.get(3).getPath())) {
            return Call.VALIDATE;
        }
        return null;
    }

    @Override
    public void filter(ContainerRequestContext request) throws IOException {
        Call call = call(request);
        if (call == null || !request.hasEntity()) {
            return;
        }
        byte[] body = request.getEntityStream().readAllBytes();
        request.setEntityStream(new ByteArrayInputStream(body));
        JsonNode root;
        try {
            root = JSON.readTree(body);
        } catch (IOException malformed) {
            return; // the worker answers a body it cannot read itself
        }
        JsonNode config = call == Call.CREATE ? root.path("config") : root;
        if (!config.isObject()) {
            return;
        }
        String problem = classProblem(call == Call.VALIDATE
                ? request.getUriInfo().getPathSegments().get(1).getPath()
                : config.path("connector.class").asText(""));
        if (problem == null) {
            problem = fileProblem(config.get(FILE));
        }
        if (problem != null) {
            ObjectNode error = JSON.createObjectNode();
            error.put("error_code", 400);
            error.put("message", problem);
            request.abortWith(Response.status(Response.Status.BAD_REQUEST)
                    .type(MediaType.APPLICATION_JSON_TYPE).entity(error.toString()).build());
            return;
        }
        if (call == Call.VALIDATE) {
            Map<String, String> references = new HashMap<>();
            config.fields().forEachRemaining(field -> {
                String value = field.getValue().asText("");
                if (value.contains("${")) {
                    references.put(field.getKey(), value);
                }
            });
            if (!references.isEmpty()) {
                request.setProperty(REFERENCES, references);
            }
        }
    }

    @Override
    public void filter(ContainerRequestContext request, ContainerResponseContext response) {
        Object sent = request.getProperty(REFERENCES);
        if (!(sent instanceof Map<?, ?> references) || !response.hasEntity()) {
            return;
        }
        JsonNode answer = JSON.valueToTree(response.getEntity());
        Iterator<JsonNode> configs = answer.path("configs").elements();
        while (configs.hasNext()) {
            JsonNode value = configs.next().path("value");
            Object reference = references.get(value.path("name").asText());
            if (reference != null && value instanceof ObjectNode field) {
                field.put("value", reference.toString());
            }
        }
        response.setEntity(answer.toString(), response.getEntityAnnotations(),
                MediaType.APPLICATION_JSON_TYPE);
    }

    /** Why a connector class is refused (one the project does not run), or null. */
    String classProblem(String connectorClass) {
        if (connectorClasses.isEmpty() || connectorClass.isEmpty()) {
            return null; // none sent: the worker names the missing field itself
        }
        for (String allowed : connectorClasses) {
            // the REST API also takes a class's simple name or its name without "Connector"
            if (allowed.equals(connectorClass) || allowed.endsWith("." + connectorClass)
                    || allowed.endsWith("." + connectorClass + "Connector")) {
                return null;
            }
        }
        return "connector.class: " + connectorClass + " is not among the connector plugins "
                + "this worker runs " + connectorClasses + " (the worker's "
                + ConnectorGuardExtension.CONNECTOR_CLASSES + ")";
    }

    /** Why the value of a {@code file} setting is refused, or null when it is allowed. */
    String fileProblem(JsonNode file) {
        if (file == null || file.isNull()) {
            return null;
        }
        String value = file.asText("");
        String where = "connectors may use files only under " + fileDirs
                + " (the worker's " + ConnectorGuardExtension.FILE_DIRS + ")";
        if (value.isBlank()) {
            return FILE + ": empty (the worker's standard input or output); " + where;
        }
        if (value.contains("${")) {
            return FILE + ": " + value + ": a config provider reference is not allowed in a "
                    + "path; " + where;
        }
        Path path = Path.of(value);
        if (!path.isAbsolute()) {
            return FILE + ": " + value + " is not an absolute path; " + where;
        }
        Path real;
        try {
            real = resolved(path);
        } catch (IOException unresolved) {
            return FILE + ": " + value + " cannot be resolved (" + unresolved.getMessage()
                    + "); " + where;
        }
        for (Path dir : fileDirs) {
            if (real.startsWith(dir) && !real.equals(dir)) {
                return null;
            }
        }
        return FILE + ": " + value + (real.equals(path) ? "" : " (" + real + ")")
                + " is outside the allowed folders; " + where;
    }

    /**
     * The path with every link and {@code ..} resolved: the longest part that exists as the
     * file system resolves it, the rest appended (a {@code ..} in that rest is refused).
     */
    static Path resolved(Path path) throws IOException {
        Deque<Path> missing = new ArrayDeque<>();
        Path existing = path;
        while (existing != null && !Files.exists(existing, LinkOption.NOFOLLOW_LINKS)) {
            missing.push(existing.getFileName());
            existing = existing.getParent();
        }
        Path real = existing == null ? path.getRoot() : existing.toRealPath();
        for (Path part : missing) {
            if ("..".equals(part.toString())) {
                throw new IOException("'..' below a folder that does not exist");
            }
            real = real.resolve(part);
        }
        return real;
    }

    /** An allowed folder as the file system resolves it (as given when it cannot be). */
    static Path realPath(Path dir) {
        try {
            return resolved(dir.toAbsolutePath().normalize());
        } catch (IOException unresolved) {
            return dir.toAbsolutePath().normalize();
        }
    }
}
