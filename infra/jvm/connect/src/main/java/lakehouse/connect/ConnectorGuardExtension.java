package lakehouse.connect;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import jakarta.ws.rs.Priorities;

import org.apache.kafka.connect.rest.ConnectRestExtension;
import org.apache.kafka.connect.rest.ConnectRestExtensionContext;

/**
 * A REST extension of the project's Connect worker (rest.extension.classes): every connector
 * config sent to the REST API passes {@link ConnectorGuard} before the worker sees it.
 *
 * <p>Why: the worker reads and writes files as its own OS user, and the FileStream
 * connectors take any path; a config provider's allowed.paths does not restrict a
 * connector's own {@code file} setting; and every plugin on the worker's class path could be
 * started. The worker property {@value #FILE_DIRS} names the folders connectors may use
 * (comma-separated absolute paths), {@value #CONNECTOR_CLASSES} the connector classes the
 * project runs (comma-separated; empty: any).
 */
public final class ConnectorGuardExtension implements ConnectRestExtension {
    public static final String FILE_DIRS = "lakehouse.connect.file.dirs";
    public static final String CONNECTOR_CLASSES = "lakehouse.connect.connector.classes";

    private List<Path> fileDirs = List.of();
    private Set<String> connectorClasses = Set.of();

    @Override
    public void configure(Map<String, ?> configs) {
        Object value = configs.get(FILE_DIRS);
        List<Path> dirs = new ArrayList<>();
        if (value != null) {
            for (String dir : value.toString().split(",")) {
                if (!dir.isBlank()) {
                    dirs.add(ConnectorGuard.realPath(Path.of(dir.trim())));
                }
            }
        }
        fileDirs = List.copyOf(dirs);
        Object classes = configs.get(CONNECTOR_CLASSES);
        Set<String> names = new TreeSet<>();
        if (classes != null) {
            for (String name : classes.toString().split(",")) {
                if (!name.isBlank()) {
                    names.add(name.trim());
                }
            }
        }
        connectorClasses = Set.copyOf(names);
    }

    @Override
    public void register(ConnectRestExtensionContext context) {
        // after the basic-auth filter: an anonymous request is refused before its body is read
        context.configurable().register(new ConnectorGuard(fileDirs, connectorClasses), Priorities.AUTHORIZATION);
    }

    @Override
    public void close() {
    }

    @Override
    public String version() {
        return "1";
    }
}
