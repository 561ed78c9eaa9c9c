// Command crewlet-peer-controller-runtime is the bench's controller-runtime contender: the
// Crewlet Company reconcile written as controller-runtime users write an operator.
//
// It watches Companies (unstructured, crewlet.ai/v1alpha1) and owns the kinds of their
// children; for each Company it fills in the placeholders of the template that
// bench/peers/template.py renders from the Python operator (the rules are in
// bench/peers/placeholders.py; the Company's spec.seats.replicas among them), server-side
// applies the children with ForceOwnership under its own field manager, and sets Accepted=True
// (with observedGeneration) through the status subresource when the condition changed. The bench builds it into the binary cache; see
// bench/peers/toolchain.py.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	fieldManager = "crewlet-peer-controller-runtime"
	tokenLength  = 43 // the Python operator's token length (placeholders.TOKEN_LENGTH)
)

var companyGVK = schema.GroupVersionKind{Group: "crewlet.ai", Version: "v1alpha1", Kind: "Company"}

// meanings are what a placeholder may stand for (placeholders.MEANINGS).
var meanings = map[string]bool{"namespace": true, "name": true, "uid": true, "token": true, "digest": true}

// owned are the kinds the controller watches for its Companies' children; the template may
// hold no other kind (checked at start).
var owned = []client.Object{
	&corev1.ServiceAccount{},
	&corev1.Secret{},
	&corev1.Service{},
	&appsv1.StatefulSet{},
	&policyv1.PodDisruptionBudget{},
	&networkingv1.NetworkPolicy{},
}

// template is the JSON document bench/peers/template.py writes.
type template struct {
	Placeholders map[string]string
	Children     []map[string]interface{}
	// SeatsReplicas is where a Company's spec.seats.replicas goes, when it sets one.
	SeatsReplicas []seatsField
}

// seatsField is a child's index and the keys down to a field that takes the seats replicas.
type seatsField struct {
	Child int
	Keys  []string
}

func loadTemplate(path string, scheme *runtime.Scheme) (*template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// apimachinery's json decodes whole numbers as int64, as unstructured objects hold them.
	var document map[string]interface{}
	if err := json.Unmarshal(raw, &document); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tpl := &template{Placeholders: map[string]string{}}
	placeholders, _ := document["placeholders"].(map[string]interface{})
	for placeholder, value := range placeholders {
		meaning, _ := value.(string)
		if !meanings[meaning] {
			return nil, fmt.Errorf("%s: %s stands for %q, which this peer does not know", path, placeholder, meaning)
		}
		tpl.Placeholders[placeholder] = meaning
	}
	children, _ := document["children"].([]interface{})
	for _, child := range children {
		obj, ok := child.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("%s: a child that is no object", path)
		}
		tpl.Children = append(tpl.Children, obj)
	}
	fields, _ := document["seatsReplicas"].([]interface{})
	for _, item := range fields {
		parts, _ := item.([]interface{})
		index, ok := int64(-1), len(parts) > 1
		if ok {
			index, ok = parts[0].(int64)
		}
		field := seatsField{Child: int(index)}
		if ok {
			for _, part := range parts[1:] {
				key, isKey := part.(string)
				ok = ok && isKey
				field.Keys = append(field.Keys, key)
			}
		}
		if !ok || field.Child < 0 || field.Child >= len(tpl.Children) {
			return nil, fmt.Errorf("%s: seatsReplicas holds %v, not a child's index and keys", path, item)
		}
		tpl.SeatsReplicas = append(tpl.SeatsReplicas, field)
	}
	kinds := map[schema.GroupVersionKind]bool{}
	for _, obj := range owned {
		gvks, _, err := scheme.ObjectKinds(obj)
		if err != nil {
			return nil, err
		}
		kinds[gvks[0]] = true
	}
	for _, child := range tpl.Children {
		gvk := (&unstructured.Unstructured{Object: child}).GroupVersionKind()
		if !kinds[gvk] {
			return nil, fmt.Errorf("%s: the controller does not own %s", path, gvk)
		}
	}
	return tpl, nil
}

// CompanyReconciler applies a Company's children and accepts it.
type CompanyReconciler struct {
	client.Client
	template *template
}

// Reconcile applies every child, then writes Accepted=True if the condition changed.
func (r *CompanyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	company := &unstructured.Unstructured{}
	company.SetGroupVersionKind(companyGVK)
	if err := r.Get(ctx, req.NamespacedName, company); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !company.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the children
	}
	for _, child := range r.children(company) {
		err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(child),
			client.FieldOwner(fieldManager), client.ForceOwnership)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("applying %s %s: %w", child.GetKind(), child.GetName(), err)
		}
	}
	return ctrl.Result{}, r.accept(ctx, company)
}

// children fills in the template for company (bench/peers/placeholders.py states the rules).
func (r *CompanyReconciler) children(company *unstructured.Unstructured) []*unstructured.Unstructured {
	uid := string(company.GetUID())
	sum := sha256.Sum256([]byte(uid))
	plain := map[string]string{
		"namespace": company.GetNamespace(),
		"name":      company.GetName(),
		"uid":       uid,
		"token":     hex.EncodeToString(sum[:])[:tokenLength],
	}
	pairs := make([]string, 0, 2*len(r.template.Placeholders))
	for placeholder, meaning := range r.template.Placeholders {
		value := plain[meaning]
		if meaning == "digest" {
			digest := sha256.Sum256([]byte(uid + "/" + placeholder))
			value = hex.EncodeToString(digest[:])
		}
		pairs = append(pairs, placeholder, value)
	}
	replacer := strings.NewReplacer(pairs...)
	children := make([]*unstructured.Unstructured, 0, len(r.template.Children))
	for _, child := range r.template.Children {
		obj := substitute(child, replacer).(map[string]interface{})
		if data, ok := obj["data"].(map[string]interface{}); ok && obj["kind"] == "Secret" {
			for key, text := range data {
				data[key] = base64.StdEncoding.EncodeToString([]byte(text.(string)))
			}
		}
		children = append(children, &unstructured.Unstructured{Object: obj})
	}
	if replicas, found, _ := unstructured.NestedInt64(company.Object, "spec", "seats", "replicas"); found {
		for _, field := range r.template.SeatsReplicas {
			// The path was checked at start, and every map on it is the template's own.
			_ = unstructured.SetNestedField(children[field.Child].Object, replicas, field.Keys...)
		}
	}
	return children
}

// substitute copies value with every placeholder replaced in its strings.
func substitute(value interface{}, replacer *strings.Replacer) interface{} {
	switch v := value.(type) {
	case string:
		return replacer.Replace(v)
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for key, item := range v {
			out[key] = substitute(item, replacer)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(v))
		for i, item := range v {
			out[i] = substitute(item, replacer)
		}
		return out
	default:
		return v
	}
}

// accept sets Accepted=True for the company's generation, writing only when that changes it.
func (r *CompanyReconciler) accept(ctx context.Context, company *unstructured.Unstructured) error {
	var conditions []metav1.Condition
	if raw, found, _ := unstructured.NestedSlice(company.Object, "status", "conditions"); found {
		for _, item := range raw {
			var condition metav1.Condition
			fields, _ := item.(map[string]interface{})
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(fields, &condition); err != nil {
				return err
			}
			conditions = append(conditions, condition)
		}
	}
	changed := meta.SetStatusCondition(&conditions, metav1.Condition{
		Type:               "Accepted",
		Status:             metav1.ConditionTrue,
		Reason:             "ChildrenApplied",
		Message:            "every child is applied",
		ObservedGeneration: company.GetGeneration(),
	})
	if !changed {
		return nil
	}
	items := make([]interface{}, 0, len(conditions))
	for i := range conditions {
		fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err != nil {
			return err
		}
		items = append(items, fields)
	}
	if err := unstructured.SetNestedSlice(company.Object, items, "status", "conditions"); err != nil {
		return err
	}
	return r.Status().Update(ctx, company)
}

func main() {
	var metricsAddr, probeAddr, templatePath, leaseNamespace, leaseName string
	var leaderElect bool
	var workers int
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address the metrics endpoint binds to")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the probe endpoint binds to")
	flag.StringVar(&templatePath, "template", "", "the children's template (bench/peers/template.py)")
	flag.BoolVar(&leaderElect, "leader-elect", false, "use a Lease so that one replica is active")
	flag.StringVar(&leaseNamespace, "leader-election-namespace", "", "namespace of the Lease")
	flag.StringVar(&leaseName, "leader-election-id", fieldManager, "name of the Lease")
	flag.IntVar(&workers, "max-concurrent-reconciles", 1, "Companies reconciled at once")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	tpl, err := loadTemplate(templatePath, scheme)
	if err != nil {
		log.Error(err, "cannot read the template")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       leaseNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Read Companies from the cache, as a typed Company would be.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		log.Error(err, "cannot create the manager")
		os.Exit(1)
	}
	company := &unstructured.Unstructured{}
	company.SetGroupVersionKind(companyGVK)
	builder := ctrl.NewControllerManagedBy(mgr).For(company).Named("company").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	for _, obj := range owned {
		builder = builder.Owns(obj)
	}
	if err := builder.Complete(&CompanyReconciler{Client: mgr.GetClient(), template: tpl}); err != nil {
		log.Error(err, "cannot create the controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		panic(err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		panic(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
